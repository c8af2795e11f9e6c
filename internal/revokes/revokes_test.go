package revokes

import (
	"fmt"
	"testing"
)

func TestSince(t *testing.T) {
	var l Log
	if ids, ok := l.Since(0); ids != nil || !ok {
		t.Fatalf("empty: %v, %v", ids, ok)
	}
	l.Add(7)
	mark := l.Seq()
	l.Add(8)
	l.Add(9)
	if ids, ok := l.Since(mark); fmt.Sprint(ids) != "[8 9]" || !ok {
		t.Fatalf("since %d: %v, %v", mark, ids, ok)
	}
	if ids, ok := l.Since(l.Seq()); ids != nil || !ok {
		t.Fatalf("none since now: %v, %v", ids, ok)
	}
	// Past Max, the older half goes: a mark before it cannot catch up.
	for i := range Max {
		l.Add(uint32(100 + i))
	}
	if _, ok := l.Since(mark); ok {
		t.Fatal("a mark older than the log caught up")
	}
	if ids, ok := l.Since(l.Seq() - 2); !ok || len(ids) != 2 {
		t.Fatalf("the latest two: %v, %v", ids, ok)
	}
}

package sys

import "testing"

func TestMemlockLimit(t *testing.T) {
	cur, max, err := MemlockLimit()
	if err != nil {
		t.Fatal(err)
	}
	if cur > max {
		t.Fatalf("soft limit %d above hard limit %d", cur, max)
	}
	t.Logf("RLIMIT_MEMLOCK cur=%d max=%d", cur, max)
}

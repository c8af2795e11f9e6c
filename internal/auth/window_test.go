package auth

import (
	"encoding/binary"
	"testing"
)

func TestWindow(t *testing.T) {
	var w Window
	for n := uint64(1); n <= 3000; n++ {
		if !w.Accept(n) {
			t.Fatalf("call %d refused", n)
		}
	}
	for _, n := range []uint64{3000, 2500, 1} {
		if w.Accept(n) {
			t.Errorf("%d accepted twice", n)
		}
	}
	if !w.Accept(5000 + WindowSize) {
		t.Error("a jump ahead refused")
	}
	if w.Accept(5000) {
		t.Error("a number a window behind accepted")
	}
	if !w.Accept(5001) || w.Accept(5001) {
		t.Error("a number inside the window: not accepted once")
	}
}

// FuzzWindow feeds a Window arbitrary sequences of numbers (8 bytes each,
// near one another or not) and checks each answer against a model that
// remembers every number: new and less than WindowSize below the highest.
func FuzzWindow(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 5000), 3000))
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 1<<63), 1<<63-WindowSize+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var w Window
		seen := map[uint64]bool{}
		var highest uint64
		for ; len(b) >= 8; b = b[8:] {
			n := binary.LittleEndian.Uint64(b)
			want := !seen[n] && (n > highest || highest-n < WindowSize)
			if got := w.Accept(n); got != want {
				t.Fatalf("Accept(%d) after highest %d: %v, want %v", n, highest, got, want)
			}
			if want {
				seen[n] = true
				highest = max(highest, n)
			}
		}
	})
}

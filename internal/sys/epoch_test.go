package sys

import (
	"testing"
	"time"
)

// TestHanded: a process is busy once more connections than busyConns
// handed something over within the window, each counted once however often
// it hands over, and no longer once the window has passed.
func TestHanded(t *testing.T) {
	defer func(w time.Duration) { spinWindow = w }(spinWindow)
	spinWindow = 50 * time.Millisecond
	handers = waitCount{}
	// Wait for the start of a window, so the connections below all fall
	// in it or the next.
	for e := epoch(); epoch() == e; {
		time.Sleep(time.Millisecond)
	}
	conns := make([]int64, busyConns+1)
	for i := range busyConns {
		for range 3 {
			if Handed(&conns[i]) {
				t.Fatalf("busy after %d connections handed over, want busy only beyond %d", i+1, busyConns)
			}
		}
	}
	if Busy() {
		t.Fatalf("Busy with %d connections handing over", busyConns)
	}
	if !Handed(&conns[busyConns]) || !Busy() {
		t.Fatalf("not busy with %d connections handing over (at most %d may)", busyConns+1, busyConns)
	}
	time.Sleep(2*spinWindow + 10*time.Millisecond)
	if Busy() {
		t.Fatal("still busy two windows after the last hand-over")
	}
	if Handed(&conns[0]) {
		t.Fatal("busy after one connection handed over in a new window")
	}
}

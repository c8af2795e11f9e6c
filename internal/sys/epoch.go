package sys

import (
	"runtime"
	"sync/atomic"
	"time"
)

// maxSpinners is how many readers of the process may spin at once (half
// the Ps, at least one; see Spinning).
var maxSpinners = int32(max(1, runtime.GOMAXPROCS(0)/2))

// busyConns is how many connections may hand over messages within a window
// before the process counts as busy (Handed): one per P, and at least two,
// so that both ends of a connection within one process, taking turns,
// are not.
var busyConns = int32(max(2, runtime.GOMAXPROCS(0)))

// spinWindow is how recently a waiting reader must have begun to wait to
// count as one with an answer due. A variable for tests.
var spinWindow = time.Millisecond

// waitCount counts the readers that began to wait in each epoch (a
// spinWindow of time since the process started), in a ring of slots that
// each hold an epoch and its count. A reader that leaves a slot reused by a
// later epoch has nothing to take back. Why by hand: nothing in the
// standard library counts by time window without a lock.
type waitCount struct {
	slots [4]atomic.Uint64 // epoch<<24 | count
}

const waitCountMask = 1<<24 - 1

var start = time.Now()

// epoch is now's epoch, at least 1.
func epoch() int64 { return epochAt(time.Now()) }

func epochAt(t time.Time) int64 { return int64(t.Sub(start)/spinWindow) + 1 }

// add counts a reader that began to wait in epoch e.
func (w *waitCount) add(e int64) {
	slot := &w.slots[e%int64(len(w.slots))]
	for {
		v := slot.Load()
		nv := uint64(e)<<24 | 1
		if int64(v>>24) == e {
			nv = v + 1
		}
		if slot.CompareAndSwap(v, nv) {
			return
		}
	}
}

// remove takes back add(e), unless e's slot has been reused since.
func (w *waitCount) remove(e int64) {
	slot := &w.slots[e%int64(len(w.slots))]
	for {
		v := slot.Load()
		if int64(v>>24) != e || v&waitCountMask == 0 {
			return
		}
		if slot.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// recent is how many readers began to wait in epoch e or the one before,
// and wait still.
func (w *waitCount) recent(e int64) int32 {
	n := int32(0)
	for _, x := range [2]int64{e, e - 1} {
		if v := w.slots[x%int64(len(w.slots))].Load(); int64(v>>24) == x {
			n += int32(v & waitCountMask)
		}
	}
	return n
}

// count is how many were counted in epoch e, 0 once its slot is reused.
func (w *waitCount) count(e int64) int32 {
	if v := w.slots[e%int64(len(w.slots))].Load(); int64(v>>24) == e {
		return int32(v & waitCountMask)
	}
	return 0
}

// Busy processes. A read loop that has delivered a message or completed a
// small operation yields its P (transport/stream), so that the goroutine it
// woke runs before the loop's next read: one request/response connection
// then turns around without a wait in the poller. But a loop that yields
// and reads again finds the answer to that goroutine's next request
// already there whenever the peer answers faster than the run queue turns
// over, and yields again. With several such loops the run queues never
// empty, and Go's scheduler, which polls the network only when they are
// empty (or every 10 ms, from sysmon), leaves the connections whose readers
// wait in the poller unread for milliseconds: the tail of 16 KV clients in
// one process (docs/TUNING.md, "Yielding only while few connections are
// busy"). So when more connections than busyConns handed something over
// within the current or the last spinWindow, the process is busy and read
// loops do not yield: each reads once more, finds the socket drained and
// waits in the poller, whose next sweep serves every ready connection in
// turn, as an event loop does.
var handers waitCount

// Handed notes that the connection whose state is *last (0 at first)
// handed over a message or a completion now, and reports whether the
// process is busy (above).
func Handed(last *int64) bool {
	e := epoch()
	if *last != e {
		*last = e
		handers.add(e)
	}
	return busyIn(e)
}

// Busy reports whether the process is busy (see Handed), without noting
// anything.
func Busy() bool { return busyIn(epoch()) }

// busyIn reports whether the process is busy in epoch e.
func busyIn(e int64) bool { return max(handers.count(e), handers.count(e-1)) > busyConns }

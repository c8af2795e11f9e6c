package verbs

import (
	"testing"
	"time"
)

// A completion never waits for the lock a poster holds across its post: on
// SoftRoCE the request completes inside ibv_post_send, and a poller that
// found the completion used to block until the poster's unlock woke it.
func TestSendQueueCompletionDoesNotWaitForPoster(t *testing.T) {
	q := newSendQueue(nil, 4)
	q.mu.Lock() // a poster, in the middle of its post
	mustReserve(t, q, 3)
	done := make(chan struct{})
	go func() {
		q.completed(3) // the poller, dispatching that post's completion
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a completion waited for the poster's lock")
	}
	q.mu.Unlock()
	if n := q.inflight.Load(); n != 0 {
		t.Fatalf("inflight = %d after completing everything, want 0", n)
	}
}

// A poster that finds the send queue full waits until completions make
// room, and only that long.
func TestSendQueueWaitsForRoom(t *testing.T) {
	q := newSendQueue(nil, 4)
	mustReserve(t, q, 4)
	got := waitingPoster(q, 2)
	stillWaiting(t, got, "on a full queue") // nothing may come out
	q.completed(1)                          // room for 1: still not enough for 2
	stillWaiting(t, got, "with room for 1 of 2")
	q.completed(1)
	if !result(t, got, "a waiting poster was not woken by the completions that made room") {
		t.Fatal("reserve reported a live queue dead")
	}
	if n := q.inflight.Load(); n != 4 {
		t.Fatalf("inflight = %d, want 4", n)
	}
}

// Killing the queue wakes a waiting poster, which reports the queue dead
// and counts nothing.
func TestSendQueueKillWakesPoster(t *testing.T) {
	q := newSendQueue(nil, 2)
	mustReserve(t, q, 2)
	got := waitingPoster(q, 1)
	q.kill()
	if result(t, got, "kill did not wake the waiting poster") {
		t.Fatal("reserve succeeded on a dead queue")
	}
	if q.reserve(1) {
		t.Fatal("reserve succeeded on a dead queue")
	}
	if n := q.inflight.Load(); n != 2 {
		t.Fatalf("inflight = %d, want 2", n)
	}
}

// waitingPoster starts a poster that reserves n requests on q, holding
// q.mu as posters do, and returns once it waits for room; its result
// arrives on the channel.
func waitingPoster(q *sendQueue, n int) <-chan bool {
	got := make(chan bool, 1)
	go func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		got <- q.reserve(n)
	}()
	for q.waiters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	return got
}

// result waits for a poster's result; it fails t with stuck if none comes.
func result(t *testing.T, got <-chan bool, stuck string) bool {
	t.Helper()
	select {
	case ok := <-got:
		return ok
	case <-time.After(10 * time.Second):
		t.Fatal(stuck)
		return false
	}
}

// mustReserve reserves n requests on a live queue.
func mustReserve(t *testing.T, q *sendQueue, n int) {
	t.Helper()
	if !q.reserve(n) {
		t.Fatal("reserve on a live queue reported it dead")
	}
}

// stillWaiting fails t if the poster behind got has returned within 50 ms.
func stillWaiting(t *testing.T, got <-chan bool, when string) {
	t.Helper()
	select {
	case ok := <-got:
		t.Fatalf("reserve returned %v %s", ok, when)
	case <-time.After(50 * time.Millisecond):
	}
}

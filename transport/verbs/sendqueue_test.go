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
	if !q.reserve(3) {
		t.Fatal("reserve on a live queue reported it dead")
	}
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
	if !q.reserve(4) {
		t.Fatal("reserve on a live queue reported it dead")
	}
	got := make(chan bool)
	go func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		got <- q.reserve(2)
	}()
	// Let the poster reach its wait: nothing may come out while full.
	for q.waiters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case ok := <-got:
		t.Fatalf("reserve returned %v on a full queue", ok)
	case <-time.After(50 * time.Millisecond):
	}
	q.completed(1) // room for 1: still not enough for 2
	select {
	case ok := <-got:
		t.Fatalf("reserve(2) returned %v with room for 1", ok)
	case <-time.After(50 * time.Millisecond):
	}
	q.completed(1)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("reserve reported a live queue dead")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting poster was not woken by the completions that made room")
	}
	if n := q.inflight.Load(); n != 4 {
		t.Fatalf("inflight = %d, want 4", n)
	}
}

// Killing the queue wakes a waiting poster, which reports the queue dead
// and counts nothing.
func TestSendQueueKillWakesPoster(t *testing.T) {
	q := newSendQueue(nil, 2)
	if !q.reserve(2) {
		t.Fatal("reserve on a live queue reported it dead")
	}
	got := make(chan bool)
	go func() { got <- q.reserve(1) }()
	for q.waiters.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	q.kill()
	select {
	case ok := <-got:
		if ok {
			t.Fatal("reserve succeeded on a dead queue")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("kill did not wake the waiting poster")
	}
	if q.reserve(1) {
		t.Fatal("reserve succeeded on a dead queue")
	}
	if n := q.inflight.Load(); n != 2 {
		t.Fatalf("inflight = %d, want 2", n)
	}
}

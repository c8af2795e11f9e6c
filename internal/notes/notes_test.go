package notes

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if a goroutine or a file descriptor is
// left behind.
func TestMain(m *testing.M) { testmain.Run(m) }

var errClosed = errors.New("closed")

func newQueue() *Queue[string, int] {
	q := new(Queue[string, int])
	q.Init()
	return q
}

func TestOrderAndLoss(t *testing.T) {
	q := newQueue()
	ctx := context.Background()
	q.Lost("a", errors.New("early")) // before any Wait: not reported
	q.Push("a", 1)
	q.Push("b", 2)
	for _, want := range []struct {
		from string
		note int
	}{{"a", 1}, {"b", 2}} {
		from, note, lost, err := q.Wait(ctx, errClosed)
		if err != nil || lost != nil || from != want.from || note != want.note {
			t.Fatalf("Wait = %q %d %v %v, want %q %d", from, note, lost, err, want.from, want.note)
		}
	}
	q.Push("a", 3)
	boom := errors.New("boom")
	q.Lost("a", boom)
	q.Lost("a", errors.New("again")) // queued once
	if _, note, lost, _ := q.Wait(ctx, errClosed); note != 3 || lost != nil {
		t.Fatalf("the loss passed the notification sent before it: %d %v", note, lost)
	}
	if from, _, lost, _ := q.Wait(ctx, errClosed); from != "a" || lost != boom {
		t.Fatalf("Wait = %q %v, want a's loss", from, lost)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, _, err := q.Wait(short, errClosed); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second loss of a was queued, or Wait did not end with ctx: %v", err)
	}
	q.Lost("a", boom) // taken: a later loss is reported again
	if _, _, lost, _ := q.Wait(ctx, errClosed); lost != boom {
		t.Fatalf("lost = %v", lost)
	}
}

func TestTakeFrom(t *testing.T) {
	q := newQueue()
	q.Push("a", 1)
	q.Push("b", 2)
	q.Push("b", 3)
	if n, ok, _ := q.TakeFrom("b"); !ok || n != 2 {
		t.Fatalf("TakeFrom(b) = %d %v", n, ok)
	}
	_, _, _, _ = q.Wait(context.Background(), errClosed) // used: losses now queue
	q.Lost("b", errors.New("gone"))
	if n, ok, _ := q.TakeFrom("b"); !ok || n != 3 {
		t.Fatalf("TakeFrom(b) = %d %v", n, ok)
	}
	_, ok, changed := q.TakeFrom("b")
	if ok {
		t.Fatal("TakeFrom took b's loss")
	}
	go q.Push("c", 4)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a push did not close TakeFrom's channel")
	}
	if from, _, lost, _ := q.Wait(context.Background(), errClosed); from != "b" || lost == nil {
		t.Fatalf("Wait = %q %v, want b's loss", from, lost)
	}
}

func TestClose(t *testing.T) {
	q := newQueue()
	done := make(chan error, 1)
	go func() {
		_, _, _, err := q.Wait(context.Background(), errClosed)
		done <- err
	}()
	for !q.Waiting() {
		time.Sleep(time.Millisecond)
	}
	q.Close()
	q.Close()
	if err := <-done; err != errClosed {
		t.Fatalf("Wait after Close = %v", err)
	}
	for range MaxLost + 10 {
		q.Lost(string(rune(len(q.lost)+'0')), errClosed)
	}
	if len(q.lost) > MaxLost {
		t.Fatalf("%d losses queued, more than %d", len(q.lost), MaxLost)
	}
}

package auth

import (
	"errors"
	"testing"
	"time"
)

// Senders refuse a replayed number, keep each sender's window apart,
// refuse new senders past Max, and forget a sender unseen for two spans.
func TestSenders(t *testing.T) {
	s := Senders{Span: time.Minute, Max: 2}
	now := time.Now()
	if err := s.Accept(1, 7, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(1, 7, now); !errors.Is(err, ErrReplayed) {
		t.Errorf("a replay: %v", err)
	}
	if err := s.Accept(2, 7, now); err != nil {
		t.Errorf("another sender's 7: %v", err)
	}
	if err := s.Accept(3, 1, now); !errors.Is(err, ErrTooManySenders) {
		t.Errorf("a third sender past Max 2: %v", err)
	}
	later := now.Add(3 * time.Minute)
	if err := s.Accept(3, 1, later); err != nil {
		t.Errorf("a new sender once the others expired: %v", err)
	}
	if err := s.Accept(1, 7, later); err != nil {
		t.Errorf("a forgotten sender starts afresh: %v", err)
	}
}

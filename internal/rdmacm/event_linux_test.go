package rdmacm

import (
	"errors"
	"syscall"
	"testing"
)

func TestEventErr(t *testing.T) {
	ev := Event{Type: EventAddrError, Status: -int(syscall.ETIMEDOUT)}
	if !errors.Is(ev.Err(), syscall.ETIMEDOUT) {
		t.Errorf("Event.Err() = %v, want ETIMEDOUT", ev.Err())
	}
	if ev := (Event{Type: EventRejected, Status: 28}); ev.Err() == nil {
		t.Error("a REJECTED event with a reason has no error")
	}
	if ev := (Event{Type: EventEstablished}); ev.Err() != nil {
		t.Errorf("ESTABLISHED: %v", ev.Err())
	}
}

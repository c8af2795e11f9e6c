package sys

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEventFD(t *testing.T) {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	e, err := NewEventFD(p[0])
	if err != nil {
		t.Fatal(err)
	}
	woke := make(chan error, 1)
	go func() { woke <- e.Wait() }()
	select {
	case <-woke:
		t.Fatal("Wait returned before the fd was readable")
	case <-time.After(20 * time.Millisecond):
	}
	unix.Write(p[1], []byte{1})
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	// Readable and not consumed: Wait returns at once again.
	if err := e.Wait(); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if n, err := unix.Read(p[0], b[:]); n != 1 || err != nil {
		t.Fatalf("original fd unusable: %d %v", n, err)
	}
	go func() { woke <- e.Wait() }()
	time.Sleep(10 * time.Millisecond)
	e.Close()
	select {
	case err := <-woke:
		if err == nil {
			t.Fatal("Wait after Close returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
	// The original is still open.
	if _, err := unix.Write(p[1], []byte{2}); err != nil {
		t.Fatal(err)
	}
}

// An eventfd rung is readable until drained.
func TestEventfdRing(t *testing.T) {
	fd, err := Eventfd()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	e, err := NewEventFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := EventfdRing(fd); err != nil {
		t.Fatal(err)
	}
	if err := e.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := e.Drain(); err != nil {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Fatal("eventfd still readable after Drain")
	}
	// Drain waits for a ring and resets the counter, allocating nothing.
	woke := make(chan error, 1)
	go func() { woke <- e.Drain() }()
	select {
	case <-woke:
		t.Fatal("Drain returned before the eventfd was rung")
	case <-time.After(20 * time.Millisecond):
	}
	EventfdRing(fd)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Fatal("eventfd still readable after Drain")
	}
	// Rung twice, one Drain resets it.
	EventfdRing(fd)
	EventfdRing(fd)
	if err := e.Drain(); err != nil {
		t.Fatal(err)
	}
	if n, _ := unix.Poll(fds, 0); n != 0 {
		t.Fatal("eventfd rung twice still readable after Drain")
	}
	if n := testing.AllocsPerRun(100, func() { EventfdRing(fd); e.Drain() }); n != 0 && !raceEnabled {
		t.Fatalf("ring and Drain: %v allocations", n)
	}
	go func() { woke <- e.Drain() }()
	time.Sleep(10 * time.Millisecond)
	e.Close()
	if err := <-woke; err == nil {
		t.Fatal("Drain after Close: no error")
	}
}

package sys

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// EventFD lets a goroutine sleep in the Go network poller until a file
// descriptor owned by C code (an RDMA completion channel, an rdma_cm event
// channel) becomes readable. It works on a duplicate, so closing it never
// closes the original; the original is made non-blocking (they share the
// open file description), so the C call that drains it never blocks.
type EventFD struct {
	f  *os.File
	rc syscall.RawConn
	// drain is Drain's attempt, built once so that a wait allocates
	// nothing; buf is its read buffer.
	drain func(fd uintptr) bool
	buf   [8]byte
}

// NewEventFD watches fd.
func NewEventFD(fd int) (*EventFD, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup fd %d: %w", fd, err)
	}
	if err := unix.SetNonblock(d, true); err != nil {
		unix.Close(d)
		return nil, fmt.Errorf("set fd %d non-blocking: %w", fd, err)
	}
	f := os.NewFile(uintptr(d), "event-fd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	e := &EventFD{f: f, rc: rc}
	e.drain = func(fd uintptr) bool {
		_, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&e.buf[0])), uintptr(len(e.buf)))
		return errno != unix.EAGAIN && errno != unix.EINTR
	}
	return e, nil
}

// Drain waits until the watched eventfd (it must be one) is readable and
// resets its counter to zero, allocating nothing; it returns an error once
// Close was called. One goroutine at a time may call it.
func (e *EventFD) Drain() error { return e.rc.Read(e.drain) }

// Wait returns once the descriptor is readable (it consumes nothing), or
// with an error once Close was called.
func (e *EventFD) Wait() error {
	var fds [1]unix.PollFd
	return e.rc.Read(func(fd uintptr) bool {
		fds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := unix.Poll(fds[:], 0)
		return err == nil && n > 0
	})
}

// Close wakes Wait and releases the duplicate. Idempotent.
func (e *EventFD) Close() error {
	if e == nil {
		return nil
	}
	e.f.Close() // a second Close reports os.ErrClosed: nothing to do
	return nil
}

// Eventfd creates an eventfd, non-blocking and close-on-exec, with its
// counter at zero: a doorbell that one process rings (EventfdRing) and
// another, which took it with pidfd_getfd, waits on (NewEventFD).
func Eventfd() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

// EventfdRing adds one to the counter of eventfd fd, which makes it
// readable. A counter that is full (it never is: a reader drains it) is
// not an error.
func EventfdRing(fd int) error {
	one := [8]byte{1}
	for {
		_, err := unix.Write(fd, one[:])
		switch err {
		case nil, unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("eventfd write: %w", err)
	}
}

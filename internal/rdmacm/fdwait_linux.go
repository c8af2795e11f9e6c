package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// fdWaiter parks goroutines on Go's network poller until the rdma_cm
// device's fd is readable, instead of blocking an OS thread in read(2). The
// fd is made non-blocking and a duplicate of it is handed to os.NewFile,
// which registers it with the poller; the original stays with the Channel,
// which closes it. (internal/ibv has the same helper for its completion
// channels; the two packages share no code that is not part of the ibv
// API.)
type fdWaiter struct {
	f  *os.File
	rc syscall.RawConn
}

func newFDWaiter(fd int, name string) (*fdWaiter, error) {
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set %s non-blocking: %w", name, err)
	}
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, fmt.Errorf("dup %s: %w", name, e)
	}
	f := os.NewFile(dup, name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &fdWaiter{f: f, rc: rc}, nil
}

// aLongTimeAgo is a deadline in the past, which wakes a parked waiter.
var aLongTimeAgo = time.Unix(1, 0)

// wait calls try until it reports done, parking on the poller whenever try
// finds nothing (it returns false, nil on EAGAIN). It gives up at deadline
// (if not zero) with os.ErrDeadlineExceeded, when ctx ends with ctx.Err(),
// and after close with ErrClosed.
func (w *fdWaiter) wait(ctx context.Context, deadline time.Time, try func() (bool, error)) error {
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || !deadline.Before(d)) {
		deadline, ctxDeadline = d, true
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return w.mapErr(err)
	}
	if ctx.Done() != nil {
		// Registered after SetReadDeadline, so it always runs after it.
		stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(aLongTimeAgo) })
		defer stop()
	}
	var terr error
	err := w.rc.Read(func(uintptr) bool {
		var done bool
		done, terr = try()
		return done
	})
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if ctxDeadline {
				// The poller's timer can fire before the context's.
				return context.DeadlineExceeded
			}
		}
		return w.mapErr(err)
	}
	return terr
}

func (w *fdWaiter) mapErr(err error) error {
	if errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

func (w *fdWaiter) close() error { return w.f.Close() }

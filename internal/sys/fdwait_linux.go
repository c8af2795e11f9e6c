package sys

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// FDWaiter parks goroutines on Go's network poller until an fd is
// readable (a verbs completion channel, the rdma_cm device), instead of
// blocking an OS thread in read(2). The fd is made non-blocking and a
// duplicate of it is handed to os.NewFile, which registers it with the
// poller; the original stays with its owner, which closes it.
type FDWaiter struct {
	f  *os.File
	rc syscall.RawConn
}

// NewFDWaiter makes fd non-blocking and registers a duplicate of it with
// the poller. name labels errors.
func NewFDWaiter(fd int, name string) (*FDWaiter, error) {
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
	return &FDWaiter{f: f, rc: rc}, nil
}

// aLongTimeAgo is a deadline in the past, which wakes a parked waiter.
var aLongTimeAgo = time.Unix(1, 0)

// Wait calls try until it reports done, parking on the poller whenever try
// finds nothing (it returns false, nil on EAGAIN). It gives up at deadline
// (if not zero) with os.ErrDeadlineExceeded, when ctx ends with ctx.Err(),
// and after Close with an error matching os.ErrClosed.
func (w *FDWaiter) Wait(ctx context.Context, deadline time.Time, try func() (bool, error)) error {
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || !deadline.Before(d)) {
		deadline, ctxDeadline = d, true
	}
	if err := w.f.SetReadDeadline(deadline); err != nil {
		return err
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
		return err
	}
	return terr
}

// Close unregisters and closes the duplicate; waiters wake with
// os.ErrClosed.
func (w *FDWaiter) Close() error { return w.f.Close() }

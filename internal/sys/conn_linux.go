package sys

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Writer makes non-blocking write attempts on a socket. It is not safe for
// concurrent use: callers serialize writes anyway. Building the callback
// once keeps each attempt free of allocations.
type Writer struct {
	rc  syscall.RawConn
	buf []byte
	iov [2][]byte
	n   int
	err error
	fn  func(fd uintptr) bool
	fnv func(fd uintptr) bool
}

// NewWriter returns a Writer for the socket behind rc.
func NewWriter(rc syscall.RawConn) *Writer {
	w := &Writer{rc: rc}
	w.fn = w.write
	w.fnv = w.writev
	return w
}

func (w *Writer) writev(fd uintptr) bool {
	for {
		w.n, w.err = unix.Writev(int(fd), w.iov[:])
		if errors.Is(w.err, unix.EINTR) {
			continue
		}
		if errors.Is(w.err, unix.EAGAIN) {
			w.n, w.err = 0, nil
		}
		return true
	}
}

// TryWritev makes one non-blocking attempt to write a then b, and returns
// how many bytes of the two went out.
func (w *Writer) TryWritev(a, b []byte) (int, error) {
	w.iov[0], w.iov[1] = a, b
	err := w.rc.Write(w.fnv)
	w.iov[0], w.iov[1] = nil, nil
	if err != nil {
		return 0, err
	}
	if w.n < 0 {
		w.n = 0
	}
	return w.n, w.err
}

func (w *Writer) write(fd uintptr) bool {
	for {
		w.n, w.err = unix.Write(int(fd), w.buf)
		if errors.Is(w.err, unix.EINTR) {
			continue
		}
		if errors.Is(w.err, unix.EAGAIN) {
			w.n, w.err = 0, nil
		}
		return true
	}
}

// TryWrite makes one non-blocking attempt to write b. It returns how many
// bytes were written; 0 with a nil error means the socket buffer is full.
// It never waits.
func (w *Writer) TryWrite(b []byte) (int, error) {
	w.buf = b
	err := w.rc.Write(w.fn)
	w.buf = nil
	if err != nil {
		return 0, err
	}
	if w.n < 0 {
		w.n = 0
	}
	return w.n, w.err
}

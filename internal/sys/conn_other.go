//go:build !linux

package sys

import (
	"errors"
	"syscall"
	"time"
)

// Writer makes no attempt on this platform: callers fall back to a blocking
// write from another goroutine.
type Writer struct{}

// NewWriter returns a Writer.
func NewWriter(rc syscall.RawConn) *Writer { return &Writer{} }

// TryWrite writes nothing.
func (w *Writer) TryWrite(b []byte) (int, error) { return 0, nil }

// MaxIovecs is the most buffers one TryWritev takes.
const MaxIovecs = 64

// TryWritev writes nothing.
func (w *Writer) TryWritev(bufs ...[]byte) (int, error) { return 0, nil }

// SendMore writes nothing here: it reports errors.ErrUnsupported.
func (w *Writer) SendMore(hdr []byte) error { return errors.ErrUnsupported }

// SendFile writes nothing here: it reports errors.ErrUnsupported.
func (w *Writer) SendFile(fd int, off int64, n int) error { return errors.ErrUnsupported }

// Reader is not supported on this platform.
type Reader struct{}

// NewReader returns nil: callers read through the connection.
func NewReader(rc syscall.RawConn, spin time.Duration) *Reader { return nil }

// SpinHits is always 0 here.
func SpinHits() uint64 { return 0 }

// Read reads nothing; NewReader never returns a Reader here.
func (r *Reader) Read(b []byte) (int, error) { return 0, ErrNotSupported }

// ReadBulk reads nothing; NewReader never returns a Reader here.
func (r *Reader) ReadBulk(b []byte, want int) (int, error) { return 0, ErrNotSupported }

// EnableLowWater does nothing here.
func (r *Reader) EnableLowWater() {}

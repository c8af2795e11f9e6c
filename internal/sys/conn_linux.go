package sys

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reads and writes here are made with raw system calls (unix.RawSyscall),
// which skip the runtime's entersyscall and exitsyscall. That is only right
// for calls that cannot block, which is the case for a socket of the Go
// network poller: it is non-blocking, and a call that would block returns
// EAGAIN (the reader then waits in the poller, the writer reports what went
// out). Skipping entersyscall matters for latency beyond its own cost: when
// every P of the process has been idle for a moment the runtime's sysmon
// thread goes to sleep, and the first ordinary system call after that wakes
// it with a futex, on the path of the request that just arrived. A raw call
// keeps the goroutine's P for its duration, so callers keep each one small
// (tens of KiB); larger transfers belong to the ordinary net.Conn methods.

// Writer makes non-blocking write attempts on a socket. It is not safe for
// concurrent use: callers serialize writes anyway. Building the callback
// once keeps each attempt free of allocations.
type Writer struct {
	rc  syscall.RawConn
	buf []byte
	iov []unix.Iovec
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
		r, _, errno := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(len(w.iov)))
		w.n, w.err = result(r, errno, "writev")
		if errno != unix.EINTR {
			return true
		}
	}
}

// MaxIovecs is the most buffers one TryWritev takes (the kernel's IOV_MAX
// is 1024; a longer batch is written in several calls).
const MaxIovecs = 64

// TryWritev makes one non-blocking attempt to write bufs in order, and
// returns how many bytes went out; 0 with a nil error means the socket
// buffer is full (or bufs holds no byte). It never waits. Only the first
// MaxIovecs buffers are written.
func (w *Writer) TryWritev(bufs ...[]byte) (int, error) {
	if len(bufs) > MaxIovecs {
		bufs = bufs[:MaxIovecs]
	}
	w.iov = w.iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			w.iov = append(w.iov, iovec(b))
		}
	}
	if len(w.iov) == 0 {
		return 0, nil
	}
	err := w.rc.Write(w.fnv)
	clear(w.iov)
	if err != nil {
		return 0, err
	}
	return w.n, w.err
}

func (w *Writer) write(fd uintptr) bool {
	for {
		r, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(bufPtr(w.buf)), uintptr(len(w.buf)))
		w.n, w.err = result(r, errno, "write")
		if errno != unix.EINTR {
			return true
		}
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
	return w.n, w.err
}

// SendMore writes all of hdr, blocking (waiting in the poller while the
// socket is full), with MSG_MORE: the kernel holds it back to go out with
// what the next call sends (SendFile's data).
func (w *Writer) SendMore(hdr []byte) error {
	for len(hdr) > 0 {
		var n int
		var err error
		werr := w.rc.Write(func(fd uintptr) bool {
			n, err = unix.SendmsgN(int(fd), hdr, nil, nil, unix.MSG_MORE)
			return err != unix.EAGAIN
		})
		if werr != nil {
			return werr
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendmsg", err)
		}
		hdr = hdr[n:]
	}
	return nil
}

// SendFile writes n bytes of the file fd, from offset off, to the socket
// with sendfile, blocking (waiting in the poller while the socket is
// full). The kernel sends the file's pages by reference, not a copy: they
// must not change until the peer has read them. It returns an error
// matching errors.ErrUnsupported, having written nothing, when the file
// cannot be sent from (a file system without splice support); the caller
// then writes the bytes itself.
func (w *Writer) SendFile(fd int, off int64, n int) error {
	first := true
	for n > 0 {
		var m int
		var err error
		werr := w.rc.Write(func(s uintptr) bool {
			m, err = unix.Sendfile(int(s), fd, &off, min(n, sendFileChunk))
			return err != unix.EAGAIN
		})
		if werr != nil {
			return werr
		}
		switch {
		case err == unix.EINTR:
			continue
		case first && (err == unix.EINVAL || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.ESPIPE):
			return fmt.Errorf("sendfile: %w: %w", os.NewSyscallError("sendfile", err), errors.ErrUnsupported)
		case err != nil:
			return os.NewSyscallError("sendfile", err)
		case m == 0:
			return fmt.Errorf("sendfile: %w at offset %d", io.ErrUnexpectedEOF, off)
		}
		first = false
		n -= m
	}
	return nil
}

// sendFileChunk bounds one sendfile call.
const sendFileChunk = 1 << 20

// Reader reads from a socket as net.Conn.Read does, waiting in the runtime's
// poller while there is nothing to read, but makes each read with a raw
// system call (see above). It is not safe for concurrent use.
type Reader struct {
	rc   syscall.RawConn
	spin time.Duration
	buf  []byte
	n    int
	err  error
	fn   func(fd uintptr) bool
	// waitEpoch: the epoch (see waiters) in which a read of this Reader
	// found the socket drained and began to wait, until the read returns;
	// 0 while it does not wait.
	waitEpoch int64
	// Bulk reads (ReadBulk): want is how many bytes the caller needs before
	// it can go on, bulk that the read is a large copy (made with an
	// ordinary system call, which gives up the P); lowat is the socket's
	// receive low-water mark as this Reader last set it (1, the kernel's
	// default, until then), and lowatOK whether it may set it at all.
	want    int
	bulk    bool
	lowat   int
	lowatOK bool
}

// NewReader returns a Reader for the socket behind rc; nil where raw reads
// are not supported (callers then read through the connection). A read that
// finds the socket drained keeps trying for spin before it waits in the
// poller (0: it waits at once); see Spinning.
func NewReader(rc syscall.RawConn, spin time.Duration) *Reader {
	r := &Reader{rc: rc, spin: spin, want: 1, lowat: 1}
	r.fn = r.read
	return r
}

// EnableLowWater lets ReadBulk wait for its bytes in the kernel: before a
// read waits in the poller, it sets the socket's receive low-water mark
// (SO_RCVLOWAT) to what its caller still needs, so that the socket becomes
// readable once that much has arrived, not at each segment. Only for TCP
// sockets: they honour the mark in poll (a Unix socket would not, which is
// harmless but useless), and wake a reader anyway when the peer closes or
// the receive window is full, so a mark above what will come cannot hang a
// read.
func (r *Reader) EnableLowWater() { r.lowatOK = true }

// Receive low-water marks. lowatMax bounds the mark: a reader woken at 1 MiB
// copies it out in four reads (the stream's read chunk) without waiting
// between them. lowatStep: the mark is raised only when that much more is wanted,
// so that the rest of a payload, which shrinks read by read, does not cost
// a system call per read; it is lowered whenever less is wanted.
const (
	lowatMax  = 1 << 20
	lowatStep = 64 << 10
)

// setLowat sets the socket's receive low-water mark for a read that is
// about to wait: to min(want, lowatMax, an eighth of the receive buffer),
// if that is lower than the mark now or lowatStep above it.
//
// The bound by the receive buffer keeps the kernel from resizing it. A mark
// the buffer cannot hold twice over makes Linux grow the buffer, and
// kernels before late 2025 then also clamp the receive window to the mark
// for the rest of the connection: a 1 MiB window across a millisecond of
// round trip is 1 GB/s at most. Under the bound the kernel changes
// nothing but the mark. A bulk connection's buffer grows on its own
// (autotuning: 13 to 32 MB within a second of 1 MiB WRITEs on loopback),
// so the mark reaches lowatMax once the connection has moved some data.
func (r *Reader) setLowat(fd uintptr) {
	if !r.lowatOK {
		return
	}
	v := min(max(r.want, 1), lowatMax)
	if v > r.lowat {
		rb, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		if err != nil {
			return
		}
		v = max(min(v, rb/8), 1)
	}
	if v < r.lowat || v >= r.lowat+lowatStep {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, v) == nil {
			r.lowat = v
		}
	}
}

// Spinning. A reader that waits in the Go poller is woken by epoll, and when
// its process had nothing else to run the CPU went idle meanwhile: on a
// virtual machine, waking an idle vCPU costs tens of microseconds, more
// than a whole loopback round trip. A reader that expects an answer soon (a
// round trip is a few microseconds to tens) does better to keep reading for
// a short while, yielding its P between attempts so the goroutines it woke
// run. At most maxSpinners readers of the process spin at once (half the
// Ps, at least one), so spinning never takes every CPU from the work that
// produces the answers. And none spins while more readers that may spin
// began to wait for data within the last spinWindow than that: a process
// with many requests out (a server with many clients, a client with many
// workers) gets its answers back to back, its CPUs do not go idle between
// them, and a spin would only take CPU from the work (4 KiB KV GETs with 16
// clients: +25%, docs/BENCHMARKS.md). A reader that has waited longer (an
// idle connection) does not count. Nor does any spin while the process
// is busy (Handed).
var (
	spinners atomic.Int32
	spinHits atomic.Uint64
	waiters  waitCount
)

// SpinHits counts the reads that found data while spinning (tests and
// diagnostics).
func SpinHits() uint64 { return spinHits.Load() }

func (r *Reader) read(fd uintptr) bool {
	spinning := false
	var until time.Time
	for {
		var n uintptr
		var errno unix.Errno
		if r.bulk {
			n, _, errno = unix.Syscall(unix.SYS_READ, fd, uintptr(bufPtr(r.buf)), uintptr(len(r.buf)))
		} else {
			n, _, errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(bufPtr(r.buf)), uintptr(len(r.buf)))
		}
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if r.lowat > 1 || r.want >= lowatStep {
				r.setLowat(fd)
			}
			if !spinning {
				if r.spin <= 0 || r.bulk {
					return false // wait in the poller, then try again
				}
				now := time.Now()
				if r.waitEpoch == 0 {
					r.waitEpoch = epochAt(now)
					waiters.add(r.waitEpoch)
				}
				if e := epochAt(now); waiters.recent(e) > maxSpinners || busyIn(e) {
					return false
				}
				if spinners.Add(1) > maxSpinners {
					spinners.Add(-1)
					return false
				}
				spinning, until = true, now.Add(r.spin)
			} else if now := time.Now(); now.After(until) || waiters.recent(epochAt(now)) > maxSpinners {
				spinners.Add(-1)
				return false
			}
			runtime.Gosched()
			continue
		}
		if spinning {
			spinners.Add(-1)
			spinHits.Add(1)
		}
		r.n, r.err = result(n, errno, "read")
		if r.n == 0 && r.err == nil && len(r.buf) > 0 {
			r.err = io.EOF
		}
		return true
	}
}

// Read reads at least one byte into b, waiting for the socket to become
// readable if need be. At the end of the stream it returns 0, io.EOF.
func (r *Reader) Read(b []byte) (int, error) {
	return r.readWant(b, 1, false)
}

// ReadBulk reads at least one byte into b, as Read does, for a caller that
// needs want bytes (at least len(b)) before it can go on: the rest of a
// large payload. The read is made with an ordinary system call, so that a
// long copy gives up the P, and does not spin; with EnableLowWater it waits
// until want bytes (at most lowatMax) have arrived, or the stream ends.
func (r *Reader) ReadBulk(b []byte, want int) (int, error) {
	return r.readWant(b, want, true)
}

func (r *Reader) readWant(b []byte, want int, bulk bool) (int, error) {
	r.buf, r.want, r.bulk = b, want, bulk
	err := r.rc.Read(r.fn)
	r.buf = nil
	if r.waitEpoch != 0 {
		waiters.remove(r.waitEpoch)
		r.waitEpoch = 0
	}
	if err != nil {
		return 0, err
	}
	return r.n, r.err
}

// result turns a raw system call's return into a count and an error; EAGAIN
// counts as nothing written.
func result(r uintptr, errno unix.Errno, op string) (int, error) {
	switch errno {
	case 0:
		return int(r), nil
	case unix.EAGAIN:
		return 0, nil
	default:
		return 0, os.NewSyscallError(op, errno)
	}
}

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: (*byte)(bufPtr(b))}
	v.SetLen(len(b))
	return v
}

func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

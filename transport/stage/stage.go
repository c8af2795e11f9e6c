package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Size is the staging memory of an engine: pieces of Piece bytes, so up to
// 16 pieces in flight for all operations together.
const (
	Size  = 64 << 20
	Piece = 4 << 20
)

// Config is what a Stager stages with.
type Config struct {
	// Devices are the engine's devices, whose copies and streams stage.
	Devices *mem.DeviceSet
	// Memory is the options of the staging memory (huge pages, shared);
	// the Stager sets its size and name.
	Memory mem.RegionOptions
	// Register registers the staging memory with the engine, so that the
	// transports can post from it. On success, close drops the
	// registration and closes r; on failure r is the Stager's to close.
	Register func(r *mem.Region) (h *mem.Handle, close func() error, err error)
	// Log gets a warning when the staging memory cannot be pinned.
	Log *slog.Logger
	// Context ends the waits for staging memory (the engine's life).
	Context context.Context
}

// Stager is one engine's staging of device memory through host memory.
type Stager struct {
	cfg Config

	once     sync.Once
	pool     *mem.Pool
	h        *mem.Handle // the staging memory's registration
	closeReg func() error
	err      error
	// mu guards pool and pinnedBy for Stats, which reads them from any
	// goroutine.
	mu       sync.Mutex
	pinnedBy mem.Device // the device that pinned the staging memory
}

// New returns a Stager; it makes its memory on first use.
func New(cfg Config) *Stager { return &Stager{cfg: cfg} }

// Needed reports whether op, posted with its local region pinned, must
// be staged through host memory: its local memory is on a device and ep
// does not move it itself, because its transport does not move that kind
// of memory (memory, the kinds its caps say it moves) or cannot move this
// operation now (its DeviceMover says no: no DMA-BUF, the peer's GPU out
// of reach).
func Needed(memory mem.Kinds, ep transport.Endpoint, op *transport.Op) bool {
	loc := op.Region.Location()
	if loc.IsHost() {
		return false
	}
	if !memory.Has(loc.Kind) {
		return true
	}
	m, ok := ep.(transport.DeviceMover)
	return !ok || !m.MovesDevice(op)
}

// staging is the pinned host memory that staged operations take their
// pieces from, registered with the engine and pinned by the driver of
// dev's kind (cuMemHostRegister), made on first use.
func (s *Stager) staging(dev mem.Location) (*mem.Pool, *mem.Handle, error) {
	s.once.Do(func() {
		c, err := s.cfg.Devices.Get(dev)
		if err != nil {
			s.err = err
			return
		}
		opts := s.cfg.Memory
		opts.Size, opts.Name = Size, "xfer-staging"
		mr, err := mem.NewRegion(opts)
		if err != nil {
			s.err = fmt.Errorf("staging memory for GPU transfers: %w", err)
			return
		}
		if err := c.Pin(mr.Bytes()); err != nil {
			// Unpinned staging still works, at the speed of pageable
			// copies.
			s.cfg.Log.Warn("staging memory for GPU transfers is not pinned: the GPU's copies run slower", "err", err)
		} else {
			s.mu.Lock()
			s.pinnedBy = c
			s.mu.Unlock()
		}
		h, closeReg, err := s.cfg.Register(mr)
		if err != nil {
			s.unpin(mr.Bytes())
			mr.Close()
			s.err = err
			return
		}
		p, err := mem.NewPool(mr, mem.PoolOptions{})
		if err != nil {
			s.unpin(mr.Bytes())
			closeReg()
			s.err = err
			return
		}
		s.mu.Lock()
		s.pool, s.h, s.closeReg = p, h, closeReg
		s.mu.Unlock()
	})
	return s.pool, s.h, s.err
}

func (s *Stager) unpin(b []byte) error {
	s.mu.Lock()
	c := s.pinnedBy
	s.pinnedBy = nil
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Unpin(b)
}

// Stats is what Stats reports of the staging memory.
type Stats struct {
	// Bytes is the staging memory's size (0 before the first staged
	// operation), UsedBytes what operations in flight hold, and Pinned
	// whether the driver pinned it.
	Bytes, UsedBytes uint64
	Pinned           bool
}

// Stats reports the staging memory's use.
func (s *Stager) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		return Stats{}
	}
	st := s.pool.Stats()
	return Stats{Bytes: st.Capacity, UsedBytes: st.InUse, Pinned: s.pinnedBy != nil}
}

// Close releases the staging memory; staged operations after it fail with
// net.ErrClosed.
func (s *Stager) Close() error {
	s.once.Do(func() { s.err = net.ErrClosed })
	if s.pool == nil {
		return nil
	}
	return errors.Join(s.pool.Close(), s.unpin(s.h.Bytes()), s.closeReg())
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// staged is a host copy of part of a device region, handed to a transport
// as a remote access's memory (transport.Resolved.Staged).
type staged struct {
	dev    mem.Device
	addr   uintptr // the device bytes it stands for
	buf    []byte
	pooled mem.Buffer  // the piece of staging memory, or
	temp   *mem.Region // memory of its own when the staging memory is full
}

func (s *staged) Commit() error {
	if err := s.dev.Copy(s.addr, addrOf(s.buf), len(s.buf)); err != nil {
		return fmt.Errorf("write of %d bytes into GPU memory: %w", len(s.buf), err)
	}
	return nil
}

func (s *staged) Release() {
	if s.temp != nil {
		s.temp.Close()
		return
	}
	if !s.pooled.IsZero() {
		s.pooled.Pool().Free(s.pooled)
	}
}

// Remote makes the host copy that stands for n bytes at offset off of
// device region h, for a peer's access, and returns its bytes: for a READ
// (read set) they hold the device's bytes already. It never waits for
// staging memory: when the staging memory is full the copy gets memory
// of its own.
func (s *Stager) Remote(h *mem.Handle, off, n uint64, read bool) ([]byte, transport.Staging, error) {
	loc := h.Location()
	c, err := s.cfg.Devices.Get(loc)
	if err != nil {
		return nil, nil, err
	}
	st := &staged{dev: c, addr: uintptr(h.Base() + off)}
	if pool, _, err := s.staging(loc); err == nil && n <= uint64(pool.Region().Len()) {
		if b, err := pool.Alloc(int(n)); err == nil {
			st.pooled, st.buf = b, b.Bytes()
		}
	}
	if st.buf == nil {
		size := int(max(n, 1))
		r, err := mem.NewRegion(mem.RegionOptions{Size: size})
		if err != nil {
			return nil, nil, fmt.Errorf("staging %d bytes of GPU memory: %w", n, err)
		}
		st.temp, st.buf = r, r.Bytes()[:n]
	}
	if read && n > 0 {
		if err := c.Copy(addrOf(st.buf), st.addr, int(n)); err != nil {
			st.Release()
			return nil, nil, fmt.Errorf("read of %d bytes from GPU memory: %w", n, err)
		}
	}
	return st.buf, st, nil
}

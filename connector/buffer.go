package connector

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
)

// Buffer is memory of the connector's registered pool holding one value:
// what a Get received, or what AllocBytes and AllocTensor hand a producer
// to fill in place. It has typed views of the value (Bytes, Tensor,
// Decode). Release hands its memory back to the pool; Close is Release, so
// a Buffer can be closed with defer. The memory is valid until Release,
// PutBuffer (which takes it over) or the connector's Close, whichever
// comes first: do not keep slices of it past that.
type Buffer struct {
	c    *Connector
	meta Meta // kind, dtype, shape and size; the key and producer after a Get

	mu       sync.Mutex
	buf      xfer.Buffer // zero for an empty value
	released bool
}

// Meta describes the value: after a Get, its metadata as the producer
// stored it; for a buffer from AllocBytes or AllocTensor, its kind, size,
// dtype and shape.
func (b *Buffer) Meta() Meta {
	m := b.meta
	m.Shape = append([]int64(nil), m.Shape...)
	return m
}

// Size is the value's size in bytes.
func (b *Buffer) Size() int64 { return b.meta.Size }

// Bytes is the value's memory, to read (or, before PutBuffer, to fill) in
// place. It is nil after Release and after the connector's Close (not
// after Stop, which leaves the memory mapped).
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released || b.meta.Size == 0 || b.c.down.Load() {
		return nil
	}
	return b.buf.Bytes()[:b.meta.Size]
}

// Location is where the buffer's memory lives: host memory, or the GPU of
// a connector whose Engine.MemoryDevice is cuda:N. GPU memory must not be
// touched by the CPU: copy it with the engine (Connector.Engine().Copy),
// or hand its address to a GPU framework.
func (b *Buffer) Location() mem.Location {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.buf.Region(); r != nil {
		return r.Location()
	}
	return mem.Host
}

// Tensor is the value as a tensor whose Data is the buffer's memory (on the
// GPU for a GPU pool: see Location). It fails for a value that is not a
// tensor.
func (b *Buffer) Tensor() (Tensor, error) {
	if b.meta.Kind != KindTensor {
		return Tensor{}, fmt.Errorf("connector: the value under %q is %v, not a tensor", b.meta.Key, b.meta.Kind)
	}
	if err := b.live(); err != nil {
		return Tensor{}, err
	}
	t := Tensor{DType: b.meta.DType, Shape: append([]int64(nil), b.meta.Shape...), Data: b.Bytes()}
	if t.Data == nil {
		t.Data = []byte{}
	}
	return t, nil
}

// Decode decodes an object (a value Put as a Go value) into v, which must
// be a pointer. The decoding is bounded (see DecodeObject).
func (b *Buffer) Decode(v any) error {
	if b.meta.Kind != KindObject {
		return fmt.Errorf("connector: the value under %q is %v, not an object", b.meta.Key, b.meta.Kind)
	}
	if err := b.live(); err != nil {
		return err
	}
	data, err := b.HostBytes()
	if err != nil {
		return fmt.Errorf("connector: decode %q: %w", b.meta.Key, err)
	}
	return DecodeObject(data, v)
}

// HostBytes is the value in host memory: Bytes itself for a pool in host
// memory, a copy for a pool on a GPU.
func (b *Buffer) HostBytes() ([]byte, error) {
	data := b.Bytes()
	if data == nil || b.Location().IsHost() {
		return data, nil
	}
	host := make([]byte, len(data))
	if err := b.c.eng.Copy(host, data); err != nil {
		return nil, err
	}
	return host, nil
}

func (b *Buffer) live() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return fmt.Errorf("connector: buffer of %q: %w", b.meta.Key, ErrReleased)
	}
	return nil
}

// take hands the buffer's memory to the caller (PutBuffer), leaving b
// released.
func (b *Buffer) take() (xfer.Buffer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return xfer.Buffer{}, fmt.Errorf("connector: %w", ErrReleased)
	}
	b.released = true
	buf := b.buf
	b.buf = xfer.Buffer{}
	return buf, nil
}

// Release hands the buffer's memory back to the pool. Idempotent; after
// the connector's Close it does nothing (the memory is gone already).
func (b *Buffer) Release() error {
	buf, err := b.take()
	if err != nil {
		return nil
	}
	return b.c.free(buf)
}

// Close is Release.
func (b *Buffer) Close() error { return b.Release() }

// alloc takes size bytes of the pool for op: at once, or waiting under
// WaitForMemory. An empty value takes no memory.
func (c *Connector) alloc(ctx context.Context, op string, size int64) (xfer.Buffer, error) {
	if size == 0 {
		return xfer.Buffer{}, nil
	}
	if c.isClosed() {
		return xfer.Buffer{}, c.errClosed(op)
	}
	pool := c.eng.Pool()
	if capacity := pool.Stats().Capacity; uint64(size) > capacity {
		return xfer.Buffer{}, fmt.Errorf("a value of %d bytes is larger than the whole pool (%d bytes; raise Engine.MemoryMB): %w", size, capacity, ErrTooLarge)
	}
	if int64(int(size)) != size {
		return xfer.Buffer{}, fmt.Errorf("a value of %d bytes: %w", size, ErrTooLarge)
	}
	var b xfer.Buffer
	var err error
	if c.cfg.WaitForMemory {
		actx, cancel := c.bounded(ctx)
		b, err = c.eng.AllocWait(actx, int(size))
		cancel()
		if err != nil && byBound(actx) {
			err = fmt.Errorf("no room for %d bytes in the pool within %v, the call bound: %w", size, c.bound, err)
		}
	} else {
		b, err = c.eng.Alloc(int(size))
	}
	if err != nil {
		if errors.Is(err, ErrPoolExhausted) {
			st := pool.Stats()
			return xfer.Buffer{}, fmt.Errorf("no room for %d bytes in the pool (%d of %d bytes in use; release buffers, or set WaitForMemory): %w", size, st.InUse, st.Capacity, err)
		}
		return xfer.Buffer{}, err
	}
	return b, nil
}

// free hands b back to the pool (nothing for the zero Buffer or once the
// engine is closed).
func (c *Connector) free(b xfer.Buffer) error {
	if b.IsZero() || c.down.Load() {
		return nil
	}
	return c.eng.Free(b)
}

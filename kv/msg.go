package kv

import (
	"context"
	"fmt"

	"github.com/xferio/xfer"
)

// msgBufs is a fixed set of registered buffers for the request and response
// messages of the data-plane request path (xfer sends only from registered
// memory). They come from a region of their own, so that they never take
// room from the value pool or the client's buffers.
type msgBufs struct {
	r    *xfer.Region
	free chan []byte
	size int
}

func newMsgBufs(e *xfer.Engine, n, size int) (*msgBufs, error) {
	r, err := e.NewRegion(n*size, xfer.AccessRead)
	if err != nil {
		return nil, fmt.Errorf("kv: message buffers: %w", err)
	}
	m := &msgBufs{r: r, free: make(chan []byte, n), size: size}
	b := r.Bytes()
	for i := range n {
		m.free <- b[i*size : (i+1)*size : (i+1)*size]
	}
	return m, nil
}

func (m *msgBufs) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-m.free:
		return b, nil
	default:
	}
	select {
	case b := <-m.free:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *msgBufs) put(b []byte) { m.free <- b[:cap(b)] }

func (m *msgBufs) close() error { return m.r.Close() }

// tryGet returns a free buffer, if there is one.
func (m *msgBufs) tryGet() ([]byte, bool) {
	select {
	case b := <-m.free:
		return b, true
	default:
		return nil, false
	}
}

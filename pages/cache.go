package pages

import (
	"context"
	"sync"

	"github.com/xferio/xfer"
)

// cache holds prefetched pages in slots of the client's registered memory.
type cache struct {
	mu     sync.Mutex
	free   []xfer.Buffer
	pages  map[uint64]*entry
	closed bool
	wg     sync.WaitGroup
}

type entry struct {
	buf   xfer.Buffer
	ready chan struct{} // closed when the read is done
	err   error
}

func newCache(eng *xfer.Engine, n, pageSize int) (*cache, error) {
	c := &cache{pages: map[uint64]*entry{}}
	for range n {
		b, err := eng.Alloc(pageSize)
		if err != nil {
			// A smaller cache will do; it is a hint.
			break
		}
		c.free = append(c.free, b)
	}
	return c, nil
}

// start reads the page at gpa into a free slot, unless it is cached or
// being read already, or no slot is free.
func (c *cache) start(ctx context.Context, p *xfer.Peer, gpa uint64, src xfer.RemoteAddr) {
	c.mu.Lock()
	if c.closed || c.pages[gpa] != nil || len(c.free) == 0 {
		c.mu.Unlock()
		return
	}
	e := &entry{buf: c.free[len(c.free)-1], ready: make(chan struct{})}
	c.free = c.free[:len(c.free)-1]
	c.pages[gpa] = e
	c.mu.Unlock()
	c.wg.Go(func() {
		e.err = p.Read(ctx, e.buf.Bytes(), src)
		close(e.ready)
	})
}

// take copies the cached page at gpa into buf and frees its slot. It waits
// for a read in progress; a page whose read failed is not taken.
func (c *cache) take(gpa uint64, buf []byte) bool {
	c.mu.Lock()
	e := c.pages[gpa]
	if e == nil {
		c.mu.Unlock()
		return false
	}
	delete(c.pages, gpa)
	c.mu.Unlock()
	<-e.ready
	ok := e.err == nil
	if ok {
		copy(buf, e.buf.Bytes())
	}
	c.release(e)
	return ok
}

// drop forgets the page at gpa (it is being written).
func (c *cache) drop(gpa uint64) {
	c.mu.Lock()
	e := c.pages[gpa]
	delete(c.pages, gpa)
	c.mu.Unlock()
	if e != nil {
		c.wg.Go(func() {
			<-e.ready
			c.release(e)
		})
	}
}

func (c *cache) release(e *entry) {
	c.mu.Lock()
	c.free = append(c.free, e.buf)
	c.mu.Unlock()
}

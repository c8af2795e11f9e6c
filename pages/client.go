package pages

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/latency"
)

// Errors.
var (
	// ErrUnaligned means a GPA is not at the start of a page.
	ErrUnaligned = errors.New("GPA not page-aligned")
	// ErrNoNode means no node owns a GPA.
	ErrNoNode = errors.New("no node owns the GPA")
	// ErrBuffer means a page buffer is not one page long.
	ErrBuffer = errors.New("buffer is not one page")
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Engine configures the client's engine. Its pool (MemoryMB) holds the
	// page buffers Alloc hands out and the prefetch cache.
	Engine xfer.Config
	// PageSize is 4096 (the default) or 2 MiB; each node's must match.
	PageSize int
	// CachePages is how many prefetched pages the client keeps. Default:
	// 256; negative: no cache (Prefetch does nothing).
	CachePages int
}

// Client fetches pages from the nodes that own them. Its methods are safe
// for concurrent use.
type Client struct {
	eng      *xfer.Engine
	pageSize uint64

	mu    sync.Mutex              // serializes AddNode
	nodes atomic.Pointer[[]*node] // sorted by base, never overlapping; replaced, never changed

	cache *cache
	lat   latency.Locked

	shardMu sync.Mutex
	shards  []*latency.Locked // the open pipelines' own, merged into Latency
}

// node is a server mapped at [base, end).
type node struct {
	addr      string
	base, end uint64
	peer      *xfer.Peer
	desc      xfer.RegionDesc
}

// NewClient opens the client's engine.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	ps, err := checkPageSize(cfg.PageSize)
	if err != nil {
		return nil, err
	}
	eng, err := xfer.Open(ctx, cfg.Engine)
	if err != nil {
		return nil, fmt.Errorf("pages: %w", err)
	}
	c := &Client{eng: eng, pageSize: uint64(ps)}
	if cfg.CachePages >= 0 {
		n := cfg.CachePages
		if n == 0 {
			n = 256
		}
		if c.cache, err = newCache(eng, n, ps); err != nil {
			eng.Close()
			return nil, err
		}
	}
	return c, nil
}

// PageSize is the client's page size.
func (c *Client) PageSize() int { return int(c.pageSize) }

// Engine is the client's engine.
func (c *Client) Engine() *xfer.Engine { return c.eng }

// AddNode dials the server at addr and maps its address space at GPA base
// (a multiple of the page size). The range must not overlap another node's.
func (c *Client) AddNode(ctx context.Context, addr string, base uint64) error {
	if base%c.pageSize != 0 {
		return fmt.Errorf("pages: node %s at GPA %#x: %w", addr, base, ErrUnaligned)
	}
	p, err := c.eng.Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("pages: node %s: %w", addr, err)
	}
	d, ok := p.Region(ExportName)
	if !ok {
		return fmt.Errorf("pages: node %s exports no %q region: is it a page server (xfer pages serve)?", addr, ExportName)
	}
	if _, ok := p.Region(pageSizeExport(int(c.pageSize))); !ok {
		return fmt.Errorf("pages: node %s serves pages of another size than this client's %d bytes", addr, c.pageSize)
	}
	if d.Len == 0 || d.Len%c.pageSize != 0 {
		return fmt.Errorf("pages: node %s: its address space of %d bytes is not a whole number of %d-byte pages: do the page sizes match?", addr, d.Len, c.pageSize)
	}
	n := &node{addr: addr, base: base, end: base + d.Len, peer: p, desc: d}
	if n.end < base {
		return fmt.Errorf("pages: node %s at GPA %#x: the range wraps around", addr, base)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var nodes []*node
	if p := c.nodes.Load(); p != nil {
		nodes = *p
	}
	for _, o := range nodes {
		if n.base < o.end && o.base < n.end {
			return fmt.Errorf("pages: node %s at [%#x, %#x) overlaps node %s at [%#x, %#x)", addr, n.base, n.end, o.addr, o.base, o.end)
		}
	}
	// A new slice: fetches read the old one without a lock.
	nodes = append(slices.Clone(nodes), n)
	slices.SortFunc(nodes, func(a, b *node) int {
		if a.base < b.base {
			return -1
		}
		return 1
	})
	c.nodes.Store(&nodes)
	return nil
}

// owner returns the node owning the page at gpa and the page's remote
// address.
func (c *Client) owner(gpa uint64) (*node, xfer.RemoteAddr, error) {
	if gpa%c.pageSize != 0 {
		return nil, xfer.RemoteAddr{}, fmt.Errorf("pages: GPA %#x: %w (page size %d)", gpa, ErrUnaligned, c.pageSize)
	}
	var nodes []*node
	if p := c.nodes.Load(); p != nil {
		nodes = *p
	}
	i, _ := slices.BinarySearchFunc(nodes, gpa, func(n *node, g uint64) int {
		switch {
		case n.end <= g:
			return -1
		case n.base > g:
			return 1
		}
		return 0
	})
	if i < len(nodes) && nodes[i].base <= gpa && gpa < nodes[i].end {
		n := nodes[i]
		return n, n.desc.At(gpa - n.base), nil
	}
	return nil, xfer.RemoteAddr{}, fmt.Errorf("pages: GPA %#x: %w", gpa, ErrNoNode)
}

// Alloc returns n page buffers in the client's registered memory, to fetch
// into. Free them with Free.
func (c *Client) Alloc(n int) ([]xfer.Buffer, error) {
	out := make([]xfer.Buffer, 0, n)
	for range n {
		b, err := c.eng.Alloc(int(c.pageSize))
		if err != nil {
			c.Free(out)
			return nil, fmt.Errorf("pages: %d page buffers: %w", n, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// Free returns page buffers from Alloc.
func (c *Client) Free(bufs []xfer.Buffer) {
	for _, b := range bufs {
		c.eng.Free(b)
	}
}

func (c *Client) checkBuf(buf []byte) error {
	if uint64(len(buf)) != c.pageSize {
		return fmt.Errorf("pages: a buffer of %d bytes: %w of %d", len(buf), ErrBuffer, c.pageSize)
	}
	return nil
}

// FetchPage reads the page at gpa into buf (one page of registered memory)
// with one READ, and records its latency.
func (c *Client) FetchPage(ctx context.Context, gpa uint64, buf []byte) error {
	if err := c.checkBuf(buf); err != nil {
		return err
	}
	n, src, err := c.owner(gpa)
	if err != nil {
		return err
	}
	t0 := sinceEpoch()
	if c.cache != nil && c.cache.take(gpa, buf) {
		c.lat.Record(sinceEpoch() - t0)
		return nil
	}
	if err := n.peer.Read(ctx, buf, src); err != nil {
		return fmt.Errorf("pages: fetch GPA %#x from %s: %w", gpa, n.addr, err)
	}
	c.lat.Record(sinceEpoch() - t0)
	return nil
}

// FetchPages reads the pages at gpas into bufs (bufs[i] gets gpas[i]) in
// one submission per node, and records each page's latency (all of a
// submission's pages count from the submission). It returns the first
// error; the pages of nodes that answered are in place.
func (c *Client) FetchPages(ctx context.Context, gpas []uint64, bufs [][]byte) error {
	return c.batch(ctx, xfer.OpRead, gpas, bufs, true)
}

// WritePage writes buf (one page of registered memory) to the page at gpa.
func (c *Client) WritePage(ctx context.Context, gpa uint64, buf []byte) error {
	if err := c.checkBuf(buf); err != nil {
		return err
	}
	n, dst, err := c.owner(gpa)
	if err != nil {
		return err
	}
	if c.cache != nil {
		c.cache.drop(gpa)
	}
	if err := n.peer.Write(ctx, buf, dst); err != nil {
		return fmt.Errorf("pages: write GPA %#x to %s: %w", gpa, n.addr, err)
	}
	return nil
}

func (c *Client) batch(ctx context.Context, kind xfer.OpKind, gpas []uint64, bufs [][]byte, record bool) error {
	if len(gpas) != len(bufs) {
		return fmt.Errorf("pages: %d GPAs and %d buffers", len(gpas), len(bufs))
	}
	// One submission per node, each with its own ops (a batch owns its
	// slice). Pages usually come from one node: then no grouping at all.
	type group struct {
		n   *node
		ops []xfer.Op
		b   *xfer.Batch
	}
	var groups []group
	for i, g := range gpas {
		if err := c.checkBuf(bufs[i]); err != nil {
			return err
		}
		n, src, err := c.owner(g)
		if err != nil {
			return err
		}
		k := 0
		for k < len(groups) && groups[k].n != n {
			k++
		}
		if k == len(groups) {
			groups = append(groups, group{n: n, ops: make([]xfer.Op, 0, len(gpas)-i)})
		}
		groups[k].ops = append(groups[k].ops, xfer.Op{Kind: kind, Local: bufs[i], Remote: src})
	}
	t0 := sinceEpoch()
	for k := range groups {
		groups[k].b = groups[k].n.peer.Submit(groups[k].ops)
	}
	var first error
	for _, g := range groups {
		if err := g.b.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("pages: fetch from %s: %w", g.n.addr, err)
		}
		if record && g.b.Done() { // not an abandoned batch, whose ops are still its own
			ok := 0
			for _, op := range g.ops {
				if op.Err == nil {
					ok++
				}
			}
			c.lat.RecordN(sinceEpoch()-t0, ok)
		}
	}
	return first
}

// Prefetch starts reading the pages at gpas into the client's cache, and
// returns without waiting. A later FetchPage of one of them that finds it
// there copies it from the cache (a local memcpy) instead of reading it.
// GPAs no node owns, and pages beyond the cache's room, are ignored: it is
// a hint. A WritePage through this client drops the page from the cache;
// writes by others are not seen, so prefetch only pages that will not
// change before they are fetched.
func (c *Client) Prefetch(ctx context.Context, gpas []uint64) {
	if c.cache == nil {
		return
	}
	for _, g := range gpas {
		n, src, err := c.owner(g)
		if err != nil {
			continue
		}
		c.cache.start(ctx, n.peer, g, src)
	}
}

// Latency summarizes the latencies recorded since the last ResetLatency,
// of FetchPage, FetchPages and every Pipeline of the client.
func (c *Client) Latency() Latency {
	c.shardMu.Lock()
	defer c.shardMu.Unlock()
	if len(c.shards) == 0 {
		return c.lat.Summary()
	}
	var all latency.Histogram
	c.lat.AddTo(&all)
	for _, h := range c.shards {
		h.AddTo(&all)
	}
	return all.Summary()
}

// ResetLatency forgets the recorded latencies.
func (c *Client) ResetLatency() {
	c.shardMu.Lock()
	defer c.shardMu.Unlock()
	c.lat.Reset()
	for _, h := range c.shards {
		h.Reset()
	}
}

// Close closes the client's engine; fetches in flight fail. Idempotent.
func (c *Client) Close() error {
	if c.cache == nil {
		return c.eng.Close()
	}
	c.cache.mu.Lock()
	c.cache.closed = true
	c.cache.mu.Unlock()
	err := c.eng.Close() // fails the cache's reads in progress
	c.cache.wg.Wait()
	return err
}

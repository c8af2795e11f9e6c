package pages

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xferio/xfer"
)

// Errors of a Pipeline.
var (
	// ErrPipelineFull means Start found depth fetches in flight: take one
	// with Next first.
	ErrPipelineFull = errors.New("pipeline full: take a fetch with Next first")
	// ErrPipelineEmpty means Next found no fetch in flight.
	ErrPipelineEmpty = errors.New("no fetch in flight")
)

// Pipeline keeps up to a fixed number of page fetches in flight: Start
// posts one READ and returns at once, Next waits for the oldest fetch and
// returns it. A caller that takes one fetch and starts another keeps the
// link as busy as depth synchronous fetchers would, from one goroutine, and
// allocates nothing per fetch. Fetches come back in the order they were
// started. Each fetch's latency, from Start to the Next that returns it,
// is recorded in the client's Latency.
//
// A Pipeline is used by one goroutine at a time; it records latencies into
// a histogram of its own, so that pipelines on several goroutines do not
// contend. Its buffers belong to the fetches in flight until Next returns
// them: before it drops a Pipeline, a caller takes every fetch (Next until
// InFlight is 0), or closes the client, and then calls Close.
type Pipeline struct {
	c     *Client
	lat   *histogram // this pipeline's, merged into the client's Latency
	slots []slot     // a ring: the oldest fetch in flight is slots[head]
	head  int
	n     int // fetches in flight
}

// slot is one fetch in flight, with its own reusable batch.
type slot struct {
	gpa    uint64
	buf    []byte
	node   *node
	t0     time.Time
	cached bool // taken from the prefetch cache: already in place
	op     [1]xfer.Op
	b      xfer.Batch
}

// NewPipeline returns a Pipeline of depth fetches in flight at most.
func (c *Client) NewPipeline(depth int) (*Pipeline, error) {
	if depth < 1 {
		return nil, fmt.Errorf("pages: a pipeline of depth %d: want 1 or more", depth)
	}
	p := &Pipeline{c: c, lat: new(histogram), slots: make([]slot, depth)}
	c.shardMu.Lock()
	c.shards = append(c.shards, p.lat)
	c.shardMu.Unlock()
	return p, nil
}

// Close folds the pipeline's latencies into the client's and forgets the
// pipeline; fetches still in flight are not waited for (their buffers stay
// theirs until they complete, or the client closes). Idempotent.
func (p *Pipeline) Close() {
	c := p.c
	c.shardMu.Lock()
	defer c.shardMu.Unlock()
	i := slices.Index(c.shards, p.lat)
	if i < 0 {
		return
	}
	c.shards = slices.Delete(c.shards, i, i+1)
	c.lat.mu.Lock()
	if c.lat.h == nil {
		c.lat.h = hdrhistogram.New(1, int64(maxLatency), 3)
	}
	p.lat.mergeInto(c.lat.h)
	c.lat.mu.Unlock()
}

// Depth is how many fetches the pipeline keeps in flight at most.
func (p *Pipeline) Depth() int { return len(p.slots) }

// InFlight is how many fetches have been started and not yet returned by
// Next.
func (p *Pipeline) InFlight() int { return p.n }

// Start posts a READ of the page at gpa into buf (one page of registered
// memory) and returns at once; Next returns it once it is in place. A page
// in the prefetch cache is copied at once instead. A bad GPA or buffer, or
// a full pipeline (ErrPipelineFull), is an error and starts nothing.
func (p *Pipeline) Start(gpa uint64, buf []byte) error {
	if p.n == len(p.slots) {
		return ErrPipelineFull
	}
	c := p.c
	if err := c.checkBuf(buf); err != nil {
		return err
	}
	n, src, err := c.owner(gpa)
	if err != nil {
		return err
	}
	s := &p.slots[(p.head+p.n)%len(p.slots)]
	s.gpa, s.buf, s.node, s.t0 = gpa, buf, n, time.Now()
	s.cached = c.cache != nil && c.cache.take(gpa, buf)
	if !s.cached {
		s.op[0] = xfer.Op{Kind: xfer.OpRead, Local: buf, Remote: src}
		n.peer.SubmitInto(&s.b, s.op[:])
	}
	p.n++
	return nil
}

// Next waits for the oldest fetch in flight and returns its GPA and
// buffer, and its error: the page is in buf when the error is nil. When
// ctx ends first, the fetch is cancelled where the transport can, and
// Next returns it with ctx's error; its buffer is free either way. With
// nothing in flight, Next returns ErrPipelineEmpty.
func (p *Pipeline) Next(ctx context.Context) (gpa uint64, buf []byte, err error) {
	if p.n == 0 {
		return 0, nil, ErrPipelineEmpty
	}
	s := &p.slots[p.head]
	if !s.cached {
		err = s.b.Wait(ctx)
	}
	p.head = (p.head + 1) % len(p.slots)
	p.n--
	gpa, buf = s.gpa, s.buf
	s.buf, s.op[0].Local = nil, nil
	if err != nil {
		return gpa, buf, fmt.Errorf("pages: fetch GPA %#x from %s: %w", gpa, s.node.addr, err)
	}
	p.lat.record(time.Since(s.t0))
	return gpa, buf, nil
}

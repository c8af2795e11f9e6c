package pages

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/latency"
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
// queues one READ and returns at once, Next returns the oldest fetch once
// it is done. A caller that takes one fetch and starts another keeps the
// link as busy as depth synchronous fetchers would, from one goroutine, and
// allocates nothing per fetch. Fetches come back in the order they were
// started. Each fetch's latency, from Start to the Next that returns it,
// is recorded in the client's Latency.
//
// Start queues; the READs queued go out together, in one submission per
// node, when Next would otherwise wait (the caller has taken every fetch
// that is done), or on Flush. So a caller that takes a burst of completed
// fetches and starts as many new ones posts them with one system call
// rather than one each.
//
// A Pipeline is used by one goroutine at a time; it records latencies into
// a histogram of its own, so that pipelines on several goroutines do not
// contend. Its buffers belong to the fetches in flight until Next returns
// them: before it drops a Pipeline, a caller takes every fetch (Next until
// InFlight is 0), or closes the client, and then calls Close.
type Pipeline struct {
	c     *Client
	lat   *latency.Locked // this pipeline's, merged into the client's Latency
	slots []slot          // a ring: the oldest fetch in flight is slots[head]
	ops   []xfer.Op       // ops[i] is slots[i]'s READ, in its group's submission
	head  int
	n     int // fetches in flight (started, not yet returned by Next)
	queue int // of which the newest queue are not yet posted
}

// slot is one fetch in flight. A group of consecutive slots, all of one
// node, is posted as one submission: the batch of its first slot (the
// leader), over those slots' ops.
type slot struct {
	gpa    uint64
	buf    []byte
	node   *node
	t0     time.Duration // since epoch (monotonic)
	done   bool          // complete (or cached), the result in ops[i].Err
	cached bool          // taken from the prefetch cache: already in place
	lead   int           // the leader of this slot's group
	group  int           // for a leader: how many slots its batch holds
	b      xfer.Batch
}

// NewPipeline returns a Pipeline of depth fetches in flight at most.
func (c *Client) NewPipeline(depth int) (*Pipeline, error) {
	if depth < 1 {
		return nil, fmt.Errorf("pages: a pipeline of depth %d: want 1 or more", depth)
	}
	p := &Pipeline{c: c, lat: new(latency.Locked), slots: make([]slot, depth), ops: make([]xfer.Op, depth)}
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
	c.lat.Merge(p.lat)
}

// Depth is how many fetches the pipeline keeps in flight at most.
func (p *Pipeline) Depth() int { return len(p.slots) }

// InFlight is how many fetches have been started and not yet returned by
// Next.
func (p *Pipeline) InFlight() int { return p.n }

// Start queues a READ of the page at gpa into buf (one page of registered
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
	i := (p.head + p.n) % len(p.slots)
	s := &p.slots[i]
	s.gpa, s.buf, s.node, s.t0, s.done, s.lead, s.group = gpa, buf, n, sinceEpoch(), false, i, 0
	p.ops[i] = xfer.Op{Kind: xfer.OpRead, Local: buf, Remote: src}
	if s.cached = c.cache != nil && c.cache.take(gpa, buf); s.cached {
		p.Flush() // the queue ends before a slot that needs no READ
		s.done = true
		p.n++
		return nil
	}
	p.n++
	p.queue++
	return nil
}

// Flush posts the READs Start queued. Next does it before it waits; a
// caller that starts fetches and then does other work before its next
// Next calls Flush to have them under way meanwhile.
func (p *Pipeline) Flush() {
	d := len(p.slots)
	for p.queue > 0 {
		// One group: consecutive queued slots of one node, not
		// wrapping around the ring (a batch's ops are one slice).
		first := (p.head + p.n - p.queue) % d
		node := p.slots[first].node
		k := 1
		for k < p.queue && first+k < d && p.slots[first+k].node == node {
			k++
		}
		for j := first; j < first+k; j++ {
			p.slots[j].lead = first
		}
		lead := &p.slots[first]
		lead.group = k
		node.peer.SubmitInto(&lead.b, p.ops[first:first+k])
		p.queue -= k
	}
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
	i := p.head
	s := &p.slots[i]
	if !s.done {
		lead := &p.slots[s.lead]
		if p.queue > 0 && (p.queue == p.n || !lead.b.Done()) {
			p.Flush() // about to wait, or the oldest is not even posted
			lead = &p.slots[s.lead]
		}
		// The batch's error is its first op's; each op has its own.
		if err := lead.b.Wait(ctx); err != nil && !lead.b.Done() {
			// ctx ended with the fetch still in flight (abandoned, see
			// xfer.Batch.Wait): it stays the oldest, for the next Next.
			return 0, nil, fmt.Errorf("pages: fetch GPA %#x from %s: %w", s.gpa, s.node.addr, err)
		}
		for j := s.lead; j < s.lead+lead.group; j++ {
			p.slots[j].done = true
		}
	}
	p.head = (p.head + 1) % len(p.slots)
	p.n--
	gpa, buf, err = s.gpa, s.buf, p.ops[i].Err
	s.buf, p.ops[i] = nil, xfer.Op{}
	if err != nil && !s.cached {
		return gpa, buf, fmt.Errorf("pages: fetch GPA %#x from %s: %w", gpa, s.node.addr, err)
	}
	p.lat.Record(sinceEpoch() - s.t0)
	return gpa, buf, nil
}

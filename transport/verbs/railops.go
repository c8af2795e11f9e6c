package verbs

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/transport"
)

// railOp is one operation, or one piece of one, posted on a rail.
type railOp struct {
	op     transport.Op // what the rail posts; Done is the railOp
	parent *transport.Op
	split  *splitOp // nil: op is the whole of parent
	re     *RailEndpoint
	rail   int
	ep     *Endpoint // rail's endpoint it is posted on
	tries  int
	one    [1]*transport.Op
	single [1]*railOp // place's answer for one piece, without allocating
}

// splitOp gathers the pieces of an operation cut over the rails.
type splitOp struct {
	parent *transport.Op
	left   atomic.Int32
	mu     sync.Mutex
	err    error
}

var railOpPool = sync.Pool{New: func() any { return new(railOp) }}

func (re *RailEndpoint) newPiece(parent *transport.Op, s *splitOp, off, n int) *railOp {
	c := railOpPool.Get().(*railOp)
	c.op = transport.Op{Kind: parent.Kind, Local: parent.Local[off : off+n], Remote: parent.Remote, Imm: parent.Imm,
		Done: c, Tag: parent.Tag, Region: parent.Region}
	c.op.Remote.Addr += uint64(off)
	c.parent, c.split, c.re, c.tries = parent, s, re, 0
	c.one[0] = &c.op
	return c
}

// Post spreads ops over the rails (see RailEndpoint).
func (re *RailEndpoint) Post(ops []*transport.Op, wait bool) {
	if len(ops) == 1 {
		op := ops[0]
		if !spread(op) {
			re.ep(0).Post(ops, wait)
			return
		}
		cs := re.place(op)
		if len(cs) == 1 {
			c := cs[0]
			re.load[c.rail].Add(1)
			c.ep.Post(c.one[:], wait)
			return
		}
		re.postPieces(cs, nil, nil)
		return
	}
	per := make([][]*transport.Op, len(re.eps))
	on := make([]*Endpoint, len(re.eps))
	on[0] = re.ep(0)
	for _, op := range ops {
		if !spread(op) {
			per[0] = append(per[0], op)
			continue
		}
		re.postPieces(re.place(op), per, on)
	}
	for i, list := range per {
		if len(list) > 0 {
			on[i].Post(list, false)
		}
	}
}

// spread reports whether op goes to any rail: WRITEs and READs do;
// messages and write-with-notify stay on rail 0, unwrapped.
func spread(op *transport.Op) bool {
	return op.Kind == transport.OpWrite || op.Kind == transport.OpRead
}

// postPieces counts the pieces in flight on their rails and adds them to
// per (on: the endpoint each list goes to), or, with per nil, posts each.
// A piece placed on an endpoint other than its list's (its rail came
// back between two placements) is posted alone.
func (re *RailEndpoint) postPieces(cs []*railOp, per [][]*transport.Op, on []*Endpoint) {
	for _, c := range cs {
		re.load[c.rail].Add(1)
		if per == nil {
			c.ep.Post(c.one[:], false)
			continue
		}
		if on[c.rail] == nil {
			on[c.rail] = c.ep
		}
		if on[c.rail] != c.ep {
			c.ep.Post(c.one[:], false)
			continue
		}
		per[c.rail] = append(per[c.rail], &c.op)
	}
}

// place cuts a WRITE or READ into its pieces, each with its rail: one
// piece on the least loaded rail, or, above a slice with several rails
// up, one piece per rail at slice boundaries.
func (re *RailEndpoint) place(op *transport.Op) []*railOp {
	n := len(op.Local)
	var up []int
	if n > re.slice {
		for i := range re.eps {
			if !re.down[i].Load() && re.ep(i).failed() == nil {
				up = append(up, i)
			}
		}
	}
	if len(up) < 2 {
		c := re.newPiece(op, nil, 0, n)
		c.rail = max(re.pick(-1, re.nodeOf(op)), 0) // none up: rail 0 says why it fails
		c.ep = re.ep(c.rail)
		c.single[0] = c
		return c.single[:]
	}
	// Cut at slice boundaries, as evenly as the slices allow.
	slices := (n + re.slice - 1) / re.slice
	k := min(len(up), slices)
	per := (slices + k - 1) / k * re.slice
	k = (n + per - 1) / per
	s := &splitOp{parent: op}
	s.left.Store(int32(k))
	cs := make([]*railOp, 0, k)
	for j := range k {
		off := j * per
		c := re.newPiece(op, s, off, min(per, n-off))
		c.rail = up[j]
		c.ep = re.ep(c.rail)
		cs = append(cs, c)
	}
	return cs
}

// OpDone completes a piece on its rail: repeated on another rail when its
// rail failed under it and it is safe to repeat, else handed on.
func (c *railOp) OpDone(*transport.Op) {
	re := c.re
	re.load[c.rail].Add(-1)
	err := c.op.Err
	if err != nil && re.repeatable(c, err) {
		if to := re.pick(c.rail, -1); to >= 0 {
			re.markDown(c.rail, c.ep, err)
			re.subs[c.rail].railRepeated.Add(1)
			c.tries++
			c.rail = to
			c.ep = re.ep(to)
			c.op.Err = nil
			re.load[to].Add(1)
			// Not from this completion's goroutine: the rail's poller,
			// or a poster polling for it.
			go c.ep.Post(c.one[:], false)
			return
		}
	}
	if err == nil {
		re.subs[c.rail].railOps.Add(1)
	}
	c.finish(err)
}

// repeatable: a WRITE or READ whose rail failed under it (not one the
// peer refused: that would fail on every rail), while the endpoint is not
// closing, at most once per rail.
func (re *RailEndpoint) repeatable(c *railOp, err error) bool {
	return (c.op.Kind == transport.OpWrite || c.op.Kind == transport.OpRead) && c.tries < len(re.eps) &&
		c.ep.failed() != nil && !errors.Is(err, transport.ErrRemoteAccess) && !re.closing()
}

func (c *railOp) finish(err error) {
	parent, s := c.parent, c.split
	*c = railOp{}
	railOpPool.Put(c)
	if s == nil {
		parent.Err = err
		parent.Done.OpDone(parent)
		return
	}
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	if s.left.Add(-1) == 0 {
		s.parent.Err = s.err
		s.parent.Done.OpDone(s.parent)
	}
}

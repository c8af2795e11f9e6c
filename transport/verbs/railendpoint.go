package verbs

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
)

// RailEndpoint is an rdma endpoint over several rails: one single-device
// Endpoint per rail, each with its own queue pairs and control stream.
//
// A WRITE or READ larger than Config.SliceSize is cut into as many pieces
// as there are rails up, at slice boundaries, one piece per rail; a
// smaller one goes to the rail with the fewest operations in flight.
// Messages (SEND) and write-with-notify stay on rail 0, so that they keep
// their order and their notification follows its data on one queue pair;
// the peer's messages arrive there too, and Consumed credits rail 0.
//
// When a rail other than rail 0 fails (its device is removed, its queue
// pairs go to the error state, its control stream is lost), the WRITEs
// and READs in flight on it are posted again on the rails still up, and
// their callers see no error: they are safe to repeat, as the engine's
// own failover says (the same bytes to the same place). The failed rail's
// endpoint is closed, and the endpoint takes the rail back once its
// device is usable again on both sides (see rejoinLoop): the dialer asks
// over a new extra connection, both connect new queue pairs over it, and
// operations are spread over the rail again. When rail 0 fails, it moves
// to its control stream when the engine allows (Params.OnFailover; see
// pathdown.go), as a single-device endpoint does: its messages and
// notifications go there, and the WRITEs and READs to the other rails.
// Otherwise the endpoint is down, and the engine reconnects.
type RailEndpoint struct {
	r     *rails
	eps   []atomic.Pointer[Endpoint] // replaced when a rail comes back
	subs  []*Transport               // each rail's device transport, for its counts
	names []string
	down  []atomic.Bool
	load  []atomic.Int64 // operations in flight, per rail
	slice int            // a WRITE or READ above it is cut over the rails
	next  atomic.Uint32  // round robin among equally loaded rails
	// numa: the rails' devices are on different known NUMA nodes, so an
	// operation prefers the rail on its memory's node (nodeOf, pick).
	numa bool

	// What a rail that comes back connects with: the role, the engine's
	// extra connections, and each rail's parameters (Conn unset).
	role   transport.Role
	extra  func(ctx context.Context) (net.Conn, error)
	params []transport.Params
	ctx    context.Context // cancelled when the endpoint is down
	cancel context.CancelFunc
	bg     sync.WaitGroup // the rejoin loops and the closing of failed rails

	done      chan struct{}
	once      sync.Once
	mu        sync.Mutex
	err       error
	shut      bool // closing: nothing is repeated any more
	rejoining bool // the dialer's rejoinLoop runs
}

var (
	_ transport.Endpoint   = (*RailEndpoint)(nil)
	_ transport.Progresser = (*RailEndpoint)(nil)
)

func newRailEndpoint(r *rails, n int) *RailEndpoint {
	re := &RailEndpoint{r: r, eps: make([]atomic.Pointer[Endpoint], n), subs: make([]*Transport, n), names: make([]string, n), down: make([]atomic.Bool, n),
		load: make([]atomic.Int64, n), slice: r.cfg.SliceSize, params: make([]transport.Params, n), done: make(chan struct{})}
	re.ctx, re.cancel = context.WithCancel(context.Background())
	return re
}

// ep is rail i's endpoint now.
func (re *RailEndpoint) ep(i int) *Endpoint { return re.eps[i].Load() }

// start watches the rails: rail 0 down takes the endpoint down, another
// rail down is marked down. The acceptor answers the dialer's requests
// to take a rail back.
func (re *RailEndpoint) start() {
	for i := range re.eps {
		go re.watch(i, re.ep(i))
	}
	if re.role == transport.Acceptor && re.extra != nil {
		re.bg.Add(1)
		go re.answerLoop()
	}
}

// watch waits for rail i's endpoint e to go down.
func (re *RailEndpoint) watch(i int, e *Endpoint) {
	select {
	case <-e.Done():
	case <-re.done:
		return
	}
	if i == 0 {
		re.fail(e.Err())
		return
	}
	re.markDown(i, e, e.Err())
}

// Rails returns the rails' device names, in order, and which are down.
func (re *RailEndpoint) Rails() (names []string, down []bool) {
	down = make([]bool, len(re.eps))
	for i := range re.eps {
		down[i] = re.down[i].Load()
	}
	return append([]string(nil), re.names...), down
}

// markDown marks rail i down once, if e is still its endpoint, counts it
// and says so. It closes e, and starts the dialer's rejoinLoop.
func (re *RailEndpoint) markDown(i int, e *Endpoint, err error) {
	if i == 0 {
		return
	}
	re.mu.Lock()
	if re.ep(i) != e || !re.down[i].CompareAndSwap(false, true) {
		re.mu.Unlock()
		return
	}
	if re.shut || re.err != nil {
		re.mu.Unlock()
		return
	}
	// Not from this goroutine: it may be e's poller, or a poster.
	re.bg.Add(1)
	go func() {
		defer re.bg.Done()
		e.Close()
	}()
	if re.role == transport.Dialer && re.extra != nil && !re.rejoining {
		re.rejoining = true
		re.bg.Add(1)
		go re.rejoinLoop()
	}
	re.mu.Unlock()
	re.subs[i].railDown.Add(1)
	re.r.probe(re.subs[i])
	re.r.mu.Lock()
	log := re.r.log
	re.r.mu.Unlock()
	if log != nil {
		log.Warn("rdma rail down; its operations are repeated on the other rails until it is back", "device", re.names[i], "rail", i, "reason", err)
	}
}

func (re *RailEndpoint) closing() bool {
	re.mu.Lock()
	defer re.mu.Unlock()
	return re.shut || re.err != nil
}

func (re *RailEndpoint) fail(err error) {
	re.cancel()
	re.mu.Lock()
	if re.err == nil {
		if err == nil {
			err = &transport.LinkError{Peer: "rdma peer", Local: true}
		}
		re.err = err
	}
	re.mu.Unlock()
	re.once.Do(func() { close(re.done) })
}

// pick returns the rail up with the fewest operations in flight, other
// than not (-1: any), or -1 when none is up. With node (the NUMA node of
// the operation's memory; -1: unknown), a rail whose device is on that
// node goes first, unless it has more than localSlack operations in
// flight beyond the least loaded rail: Mooncake matches each buffer to
// the NICs of its node the same way, and spills to the others under load.
func (re *RailEndpoint) pick(not, node int) int {
	best, load := -1, int64(0)
	local, localLoad := -1, int64(0)
	start := int(re.next.Add(1))
	for k := range re.eps {
		i := (start + k) % len(re.eps)
		if i == not || re.down[i].Load() || re.ep(i).failed() != nil || re.ep(i).onStream() {
			continue
		}
		l := re.load[i].Load()
		if best < 0 || l < load {
			best, load = i, l
		}
		if node >= 0 && re.subs[i].numaNode == node && (local < 0 || l < localLoad) {
			local, localLoad = i, l
		}
	}
	if local >= 0 && localLoad <= load+localSlack {
		return local
	}
	if best < 0 && not != 0 && !re.down[0].Load() && re.ep(0).failed() == nil {
		// Rail 0 moved to its control stream (see pathdown.go) and no
		// other rail is up: it carries the operations, slowly.
		best = 0
	}
	return best
}

// localSlack is how many more operations in flight the rail on an
// operation's NUMA node may have than the least loaded rail, and still
// take it.
const localSlack = 4

// nodeOf is the NUMA node of op's memory (its registered region's, looked
// up once per region with get_mempolicy), or -1 when the rails' nodes do
// not differ or it is unknown.
func (re *RailEndpoint) nodeOf(op *transport.Op) int {
	if !re.numa || op.Region == nil {
		return -1
	}
	if v, ok := re.r.memNodes.Load(op.Region); ok {
		return v.(int)
	}
	n := -1
	if op.Region.Location().IsHost() {
		if m, err := memNode(op.Region.Bytes()); err == nil {
			n = m
		}
	}
	re.r.memNodes.Store(op.Region, n)
	return n
}

// memNode is sys.MemNode; tests stand in nodes of their own.
var memNode = sys.MemNode

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

// Cancel cannot take back posted work requests: it returns false.
func (re *RailEndpoint) Cancel(*transport.Op) bool { return false }

// Consumed gives rail 0, where the messages arrive, its receive buffers
// back.
func (re *RailEndpoint) Consumed(n int) { re.ep(0).Consumed(n) }

// Revoke tells the peer over every rail's control stream.
func (re *RailEndpoint) Revoke(id uint32) {
	for i := range re.eps {
		if e := re.ep(i); e != nil {
			e.Revoke(id)
		}
	}
}

// Done is closed when the endpoint is down: rail 0 failed, or Close.
func (re *RailEndpoint) Done() <-chan struct{} { return re.done }

// Err says why the endpoint is down.
func (re *RailEndpoint) Err() error {
	re.mu.Lock()
	defer re.mu.Unlock()
	return re.err
}

// Transport is "rdma".
func (re *RailEndpoint) Transport() string { return "rdma" }

// Progress sums the rails' progress.
func (re *RailEndpoint) Progress() (moved uint64, pending int) {
	for i := range re.eps {
		m, p := re.ep(i).Progress()
		moved += m
		pending += p
	}
	return moved, pending
}

// Close closes every rail; operations in flight fail and are not
// repeated. A rail being taken back is given up.
func (re *RailEndpoint) Close() error {
	re.mu.Lock()
	re.shut = true
	re.mu.Unlock()
	re.cancel()
	re.bg.Wait()
	for i := range re.eps {
		if e := re.ep(i); e != nil {
			e.Close()
		}
	}
	re.fail(nil)
	return nil
}

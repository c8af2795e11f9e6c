package verbs

import (
	"context"
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

// Rails returns the rails' device names, in order, and which are down.
func (re *RailEndpoint) Rails() (names []string, down []bool) {
	down = make([]bool, len(re.eps))
	for i := range re.eps {
		down[i] = re.down[i].Load()
	}
	return append([]string(nil), re.names...), down
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

var (
	_ transport.Announcer = (*Endpoint)(nil)
	_ transport.Announcer = (*RailEndpoint)(nil)
)

// AnnounceExport tells the peer of a later export over rail 0's control
// stream, which lives as long as the endpoint.
func (re *RailEndpoint) AnnounceExport(export []byte) error {
	return re.ep(0).AnnounceExport(export)
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

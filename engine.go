package xfer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/negotiate"
	"github.com/xferio/xfer/internal/notes"
	"github.com/xferio/xfer/internal/revokes"
	"github.com/xferio/xfer/internal/status"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stage"
)

// Engine is one process's endpoint of xfer: it owns registered memory,
// listens for peers, and dials them.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	id     ID
	hostID [16]byte

	regions regionTable
	region  *Region // the default pool's region
	pool    *mem.Pool

	transports map[string]transport.Transport
	negotiate  *negotiate.Table // the transports it offers and accepts

	ln       net.Listener
	addr     string
	exportMu sync.RWMutex
	exports  []wire.Export
	exportN  uint64                         // changes to exports so far; guarded by exportMu
	node     atomic.Pointer[directory.Node] // the directory (Config.Directory) and this engine's entry; nil until Open registers

	// ready is closed when the engine answers handshakes: at the end of
	// Open, or at Ready with Config.HoldPeers.
	ready     chan struct{}
	readyOnce sync.Once

	mu     sync.Mutex
	closed bool
	dialed map[string]*Peer
	peers  map[*Peer]struct{}
	joins  map[[16]byte]chan net.Conn
	// resumes: the accepted peers by their connections' Welcome tokens,
	// for a dialer's probe that resumes one (wire.CapResume).
	resumes  map[[16]byte]*Peer
	accepted chan *Peer
	revokes  revokes.Log // the regions revoked, numbered; guarded by mu

	notes notes.Queue[*Peer, Notification] // notifications and losses for WaitNotify
	gpu   gpus                             // GPU contexts and staging memory, made on first use

	stats        status.Log
	auth         auth.Refusals  // refusals, for AuthFailed and Status
	allowedPeers auth.Allowlist // security.allowed_peers; none: every address
	pending      *admit.Gate    // inbound connections in their handshake (security.max_pending_*)
	metrics      *metrics.Set   // nil without Config.Metrics
	fb           failbackOpts   // probing paused transports (failback.go)

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// failbackOpts is the engine's side of failback: the backoff, and a test's
// stand-in for a device that is gone.
type failbackOpts struct {
	first, max time.Duration // 0: the defaults (internal/failback)
	// refuse, when set, makes the dialer treat transport name as not
	// available when it returns an error, as a removed device makes rdma's
	// Available fail. Tests only: shm cannot be taken away for real.
	refuse func(name string) error
}

// gpus is an engine's device state: its devices of every kind in mem's
// table, opened on first use, and the staging of their memory for the
// transports that move host memory only (transport/stage).
type gpus struct {
	mem.DeviceSet

	once  sync.Once
	stage stager // made on first use (stager)
}

// stager is what the engine needs of the staging of device memory through
// host memory: *stage.Stager.
type stager interface {
	// Post runs an operation whose local memory is on a device over an
	// endpoint that moves host memory only; it completes through op.Done.
	Post(ep transport.Endpoint, op *transport.Op)
	// Remote makes the host copy that stands for a range of a device
	// region that a peer accesses.
	Remote(h *mem.Handle, off, n uint64, read bool) ([]byte, transport.Staging, error)
	Stats() stage.Stats
	Close() error
}

// Ready lets the engine answer handshakes: those it holds and those to
// come. An engine opened with Config.HoldPeers answers none before it, so
// that its owner calls Ready once everything a peer may ask for is in
// place (the regions it exports, its services); a peer that dials after
// Ready learns that its exports were complete, and Peer.Region waits for
// no other name. Without HoldPeers the engine is ready when Open returns.
// Idempotent.
func (e *Engine) Ready() { e.readyOnce.Do(func() { close(e.ready) }) }

// isReady reports whether Ready was called.
func (e *Engine) isReady() bool {
	select {
	case <-e.ready:
		return true
	default:
		return false
	}
}

// ID is the engine's random identity.
func (e *Engine) ID() ID { return e.id }

// Addr is the address peers dial, or "" when the engine does not listen.
func (e *Engine) Addr() string { return e.addr }

// Config is the engine's configuration, with defaults filled in (a copy:
// changing it changes nothing in the engine).
func (e *Engine) Config() Config { return e.cfg.Clone() }

// Pool is the default pool. Its buffers are registered read-write.
func (e *Engine) Pool() *mem.Pool { return e.pool }

// DefaultRegion is the registered region under the default pool.
func (e *Engine) DefaultRegion() *Region { return e.region }

// Alloc takes a buffer from the default pool; a full pool returns an error
// matching ErrPoolExhausted at once.
func (e *Engine) Alloc(size int) (Buffer, error) {
	b, err := e.pool.Alloc(size)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{Buffer: b, r: e.region}, nil
}

// AllocWait is Alloc, but waits for memory to be freed until ctx is done.
func (e *Engine) AllocWait(ctx context.Context, size int) (Buffer, error) {
	b, err := e.pool.AllocWait(ctx, size)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{Buffer: b, r: e.region}, nil
}

// Free returns a buffer to the pool. Double frees and foreign buffers are
// reported, never corrupting the pool.
func (e *Engine) Free(b Buffer) error { return e.pool.Free(b.Buffer) }

// sharedMemory reports whether the engine's memory is a memfd (Config.Memory):
// by default under the auto and shm policies, so that same-host peers can
// map it (a transport that maps memory: shm); the tcp transport then also sends WRITEs from
// it without copying them into the socket (sendfile). Under tcp and rdma it
// is private memory with transparent huge pages by default, which a
// receiving socket copies into faster than into a memfd's small pages
// (docs/BENCHMARKS.md).
func (c Config) sharedMemory() bool {
	switch c.Memory {
	case MemoryMemfd:
		return true
	case MemoryPrivate:
		return false
	}
	return policyMapsMemory(c.Transport)
}

// NewRegion maps size bytes (huge pages as configured) and registers them
// with the given rights.
func (e *Engine) NewRegion(size int, access Access) (*Region, error) {
	mr, err := mem.NewRegion(mem.RegionOptions{Size: size, HugePages: e.cfg.HugePages,
		Shared: e.cfg.sharedMemory(), Name: "xfer-region"})
	if err != nil {
		return nil, err
	}
	return e.adopt(mr, access)
}

// adopt registers mr, which the engine owns: it is closed if that fails.
func (e *Engine) adopt(mr *mem.Region, access Access) (*Region, error) {
	r, err := e.addRegion(mr, access, nil)
	if err != nil {
		mr.Close()
		return nil, err
	}
	return r, nil
}

// Register registers memory the caller mapped (mmap, not the Go heap: the
// garbage collector may move or free heap memory under a peer). Closing the
// region deregisters it and leaves the memory to the caller.
func (e *Engine) Register(b []byte, access Access) (*Region, error) {
	mr, err := mem.WrapRegion(b)
	if err != nil {
		return nil, err
	}
	return e.addRegion(mr, access, nil)
}

// Fallbacks counts peers that got a lesser transport than auto preferred.
func (e *Engine) Fallbacks() uint64 { return e.stats.Fallbacks.Load() }

// SetupRetries counts connection setups that failed transiently (the
// peer's connection manager refused or dropped the connection being set up)
// and were tried again with a new handshake.
func (e *Engine) SetupRetries() uint64 { return e.stats.SetupRetries.Load() }

// Peers returns the engine's peers: those it dialed (a dialed peer whose
// connection failed stays, and dials again on its next operation) and those
// that dialed it and are still connected (one whose connection failed is
// released at once, see Peer.Down).
func (e *Engine) Peers() []*Peer {
	e.mu.Lock()
	defer e.mu.Unlock()
	ps := make([]*Peer, 0, len(e.peers))
	for p := range e.peers {
		ps = append(ps, p)
	}
	return ps
}

// Accept returns the next peer that connected to this engine.
func (e *Engine) Accept(ctx context.Context) (*Peer, error) {
	select {
	case p := <-e.accepted:
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.ctx.Done():
		return nil, fmt.Errorf("accept: %w", ErrClosed)
	}
}

// Notification is what the target of a write-with-notify receives, once the
// data is in place. Region and Addr are zero on the rdma transport, where
// the NIC reports only the value and the length (WRITE_WITH_IMM).
type Notification struct {
	Peer   *Peer
	Value  uint32
	Region uint32
	Addr   uint64
	Len    uint64
}

// WaitNotify returns the next notification from any peer, except those of
// a peer with a handler (Peer.HandleNotify).
//
// It also tells of each peer lost: once the engine's WaitNotify has been
// called, a peer without a handler whose connection fails (it died, its
// link broke, or it stalled: quiet while a WaitNotify waits, it is probed
// as for Peer.WaitNotify, and one that does not answer within
// Config.OpTimeout is cut off) is reported once, after the notifications
// it sent before, by a WaitNotify that returns a *PeerLostError naming
// it. The error matches ErrPeerLost (and so ErrClosed: test for
// ErrPeerLost first), and a *StallError for a stall. The other peers'
// notifications go on: a caller that waits for many peers takes note of
// the one lost and calls WaitNotify again. A peer closed here
// (Peer.Close) is not reported, nor are those lost before the first
// WaitNotify (watch Peer.Down for those); at most 1024 losses wait to be
// reported, one per peer.
func (e *Engine) WaitNotify(ctx context.Context) (Notification, error) {
	from, note, lost, err := e.notes.Wait(ctx, errWaitClosed)
	switch {
	case err != nil:
		return Notification{}, err
	case lost != nil:
		return Notification{}, &PeerLostError{Peer: from, Err: lost}
	}
	return note, nil
}

var errWaitClosed = fmt.Errorf("wait notify: %w", ErrClosed)

// PeerLostError is the error of Engine.WaitNotify that reports a peer
// lost: its connection failed (it died, its link broke, or it stalled),
// so no more notifications come from it on that connection. It matches
// ErrPeerLost (and so ErrClosed), and Err through Unwrap: a *StallError
// when the peer stalled.
type PeerLostError struct {
	Peer *Peer // the peer lost
	Err  error // how its connection ended
}

func (e *PeerLostError) Error() string {
	return fmt.Sprintf("wait notify: lost peer %s: %v", e.Peer, e.Err)
}

// Is matches ErrPeerLost.
func (e *PeerLostError) Is(target error) bool { return target == ErrPeerLost }

// Unwrap returns how the peer's connection ended.
func (e *PeerLostError) Unwrap() error { return e.Err }

// revoke tells every peer that region id is gone. Revokes are logged
// (internal/revokes): setEndpoint and addPeer replay those made since the
// Peer started connecting, which its endpoint, serving before the engine
// lists the Peer, would otherwise miss.
func (e *Engine) revoke(id uint32) {
	e.mu.Lock()
	e.revokes.Add(id)
	peers := make([]*Peer, 0, len(e.peers))
	for p := range e.peers {
		peers = append(peers, p)
	}
	e.mu.Unlock()
	for _, p := range peers {
		if ep := p.current(); ep != nil {
			ep.Revoke(id)
		}
		if d := p.draining.Load(); d != nil {
			(*d).Revoke(id)
		}
	}
}

// replayRevokes sends ep the revokes made since p began to connect it, when
// p is listed (otherwise addPeer does it).
func (e *Engine) replayRevokes(p *Peer, ep transport.Endpoint) {
	e.mu.Lock()
	_, listed := e.peers[p]
	ids, ok := e.revokes.Since(p.mark.Load())
	e.mu.Unlock()
	if listed {
		sendRevokes(ep, ids, ok)
	}
}

// sendRevokes replays ids to ep, or closes ep when the log had lost some
// (complete is false): its peer then reconnects and attaches afresh.
func sendRevokes(ep transport.Endpoint, ids []uint32, complete bool) {
	if !complete {
		ep.Close()
		return
	}
	for _, id := range ids {
		ep.Revoke(id)
	}
}

func (e *Engine) addPeer(p *Peer) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("engine: %w", ErrClosed)
	}
	e.peers[p] = struct{}{}
	ids, ok := e.revokes.Since(p.mark.Load())
	e.mu.Unlock()
	// Revokes made while p connected, before it was listed.
	if ep := p.current(); ep != nil {
		sendRevokes(ep, ids, ok)
	}
	if p.dialAddr == "" {
		e.exportsSince(p) // and exports
	}
	return nil
}

func (e *Engine) removePeer(p *Peer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.metrics != nil {
		e.metrics.Retire(p.stats.Conn())
	}
	delete(e.peers, p)
	if p.dialAddr != "" && e.dialed[p.dialKey] == p {
		delete(e.dialed, p.dialKey)
	}
}

// closedOr returns ErrClosed once the engine is closing (Close deregisters
// the memory an operation in flight may name), err otherwise.
func (e *Engine) closedOr(err error) error {
	if e.ctx.Err() != nil {
		return fmt.Errorf("engine closed: %w", ErrClosed)
	}
	return err
}

// caps returns the capabilities of the transport named, as it states
// them (the extra transport, Config.ExtraTransport, too); none for a name
// the engine does not have.
func (e *Engine) caps(name string) transport.Caps {
	if t := e.transports[name]; t != nil {
		return t.Caps()
	}
	return transport.Caps{}
}

// The engine's own TCP connections, which its handshake dials and accepts
// and the chosen transport then takes over, get their congestion control
// from the tcp section (tcp.congestion: transport/tcp/congestion.go).

// dialControl is the engine's net.Dialer Control.
func (e *Engine) dialControl(network, address string, c syscall.RawConn) error {
	return e.cfg.TCP.DialControl(network, address, c)
}

// listenControl is the engine's net.ListenConfig Control.
func (e *Engine) listenControl(network, address string, c syscall.RawConn) error {
	return e.cfg.TCP.ListenControl(network, address, c)
}

// acceptedCongestion gives a connection accepted from the engine's listener
// its own congestion control (under auto, the system's default to another
// host).
func (e *Engine) acceptedCongestion(nc net.Conn) { e.cfg.TCP.Accepted(nc) }

// exportsSince sends an accepted peer the exports made after its Welcome
// listed them (exportMark), before the engine listed the peer.
func (e *Engine) exportsSince(p *Peer) {
	e.exportMu.RLock()
	if e.exportN == p.exportMark.Load() {
		e.exportMu.RUnlock()
		return
	}
	xs := slices.Clone(e.exports)
	e.exportMu.RUnlock()
	for i := range xs {
		p.announce(wire.AppendExport(nil, &xs[i]))
	}
}

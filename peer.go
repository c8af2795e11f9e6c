package xfer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/failback"
	"github.com/xferio/xfer/internal/inbox"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Peer is a connection to another engine. Either side may start any
// operation on it. Its methods are safe for concurrent use.
type Peer struct {
	e        *Engine
	dialAddr string // set for peers this engine dialed: they reconnect
	dialKey  string // the key of the engine's cache of dialed peers
	policy   Policy // the policy it is dialed under (WithTransport), else the engine's

	mu      sync.Mutex // guards remote, exports, dialing and closed
	remote  transport.PeerInfo
	exports map[string]RegionDesc
	// exportsFinal is set when the remote engine was ready (HoldPeers,
	// Engine.Ready) before the handshake that listed exports: a name it
	// did not list is absent, and Region does not wait for it. exportsSeen
	// is closed, and set to nil, when exports change (Region's waiters).
	exportsFinal bool
	exportsSeen  chan struct{}
	// exportsLive says the remote takes and sends exports made after the
	// handshake (wire.CapExports). exportMark, for an accepted peer, is
	// the engine's count of exports when its Welcome listed them: exports
	// made before the peer was listed are sent to it then (addPeer).
	exportsLive atomic.Bool
	exportMark  atomic.Uint64
	closed      bool
	dialing     chan struct{}  // closed when a dial in progress ends
	fb          failback.State // a better transport lost and probed (failback.go)
	// downSince is when a reconnection of this dialed peer was first
	// refused since its last connection, and downDials how many dials
	// were refused since (Config.ReconnectWait); zero while it connects.
	downSince time.Time
	downDials int

	ep atomic.Pointer[epBox]
	// draining is the connection a move back to a paused transport
	// replaced, while its operations end (failback.go): revokes reach it.
	draining atomic.Pointer[transport.Endpoint]
	// stall is set when the watchdog closed an endpoint whose peer made
	// no progress (Config.OpTimeout).
	stall atomic.Pointer[stallRec]
	// waiters counts the goroutines waiting for this peer to send
	// (Recv, WaitNotify); probing is set while the watchdog's probe of
	// a quiet peer with waiters is out (watchdog.go).
	waiters atomic.Int32
	probing atomic.Bool
	mark    atomic.Uint64 // the engine's revoke count when the connection began
	// tokens holds the Welcome token of each live connection this engine
	// dialed (transport.Endpoint → [16]byte): a probe resumes with the
	// current one's (wire.CapResume).
	tokens sync.Map
	// retired holds the connections a move replaced and closes on purpose
	// (a move back to a paused transport, a resumed peer's old one): their
	// end is no loss to report (Engine.WaitNotify), and a waiter on one
	// waits on the peer's new connection instead. Kept while the peer
	// lives: moves are rare.
	retired sync.Map

	stats peerStats

	inbox  *inbox.Inbox                       // messages for Recv, or its handler (Handle)
	notify atomic.Pointer[func(Notification)] // set by HandleNotify
	done   chan struct{}
}

// stallRec records that the watchdog closed ep because its peer stalled.
type stallRec struct {
	ep      transport.Endpoint
	timeout time.Duration
	pending int
}

// epBox is the current endpoint and, when the engine has metrics, its
// counters: published together, so that an operation counts on the
// counters of the endpoint it is posted to.
type epBox struct {
	ep   transport.Endpoint
	conn *metrics.Conn
}

func (e *Engine) newPeer(dialAddr string, remote transport.PeerInfo) *Peer {
	p := &Peer{e: e, dialAddr: dialAddr, dialKey: dialAddr, policy: e.cfg.Transport, inbox: inbox.New(), done: make(chan struct{})}
	p.markRevokes()
	p.setRemote(remote, nil, false)
	return p
}

// setRemote records the remote engine and the exports its handshake listed;
// final says that they are complete (exportsFinal).
func (p *Peer) setRemote(remote transport.PeerInfo, exports []wire.Export, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.remote = remote
	p.exports = make(map[string]RegionDesc, len(exports))
	for _, x := range exports {
		p.exports[x.Name] = descFromWire(x.Desc)
	}
	p.exportsFinal = final
	p.exportsChanged()
}

// addExport records a region the remote exported after the handshake.
func (p *Peer) addExport(x wire.Export) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.exports[x.Name]; !ok && len(p.exports) >= wire.MaxExports {
		return fmt.Errorf("export %q: the peer exports more than %d regions", x.Name, wire.MaxExports)
	}
	p.exports[x.Name] = descFromWire(x.Desc)
	p.exportsChanged()
	return nil
}

// exportsChanged wakes Region's waiters; p.mu is held.
func (p *Peer) exportsChanged() {
	if p.exportsSeen != nil {
		close(p.exportsSeen)
		p.exportsSeen = nil
	}
}

func (p *Peer) current() transport.Endpoint {
	if b := p.ep.Load(); b != nil {
		return b.ep
	}
	return nil
}

// String names the peer by address or ID.
func (p *Peer) String() string {
	if p.dialAddr != "" {
		return p.dialAddr
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.remote.Addr != "" {
		return p.remote.Addr
	}
	return ID(p.remote.ID).String()
}

// ID is the remote engine's ID.
func (p *Peer) ID() ID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.remote.ID
}

// Transport is the transport in use: "tcp", "shm" or "rdma" ("" while not
// connected).
func (p *Peer) Transport() string {
	if ep := p.current(); ep != nil {
		return ep.Transport()
	}
	return ""
}

// Region returns the descriptor the remote engine exported under name: one
// its handshake listed, or one it exported later and told this engine of.
//
// A name not seen yet is waited for while the connection is young: a
// region exported just after the remote began accepting peers is on its
// way. Region waits until the name arrives, until the connection has been
// up for Config.HandshakeTimeout, or until it fails, whichever comes first,
// and then says the name is absent. It does not wait when the remote was
// ready before the handshake (Config.HoldPeers and Engine.Ready: its
// exports were complete), nor when the remote cannot tell of later exports
// (an older engine, or a transport without a control stream).
func (p *Peer) Region(name string) (RegionDesc, bool) {
	for {
		p.mu.Lock()
		d, ok := p.exports[name]
		if ok || p.exportsFinal || p.closed || !p.exportsLive.Load() {
			p.mu.Unlock()
			return d, ok
		}
		ep := p.current()
		_, told := ep.(transport.Announcer) // the remote's endpoint is of the same transport
		up := p.stats.upSince.Load()
		if !told || up == 0 {
			p.mu.Unlock()
			return d, false
		}
		wait := time.Until(time.Unix(0, up).Add(p.e.cfg.HandshakeTimeout))
		if wait <= 0 {
			p.mu.Unlock()
			return d, false
		}
		if p.exportsSeen == nil {
			p.exportsSeen = make(chan struct{})
		}
		seen := p.exportsSeen
		p.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-seen:
			t.Stop()
			continue
		case <-t.C:
		case <-ep.Done():
			t.Stop()
		case <-p.done:
			t.Stop()
		}
		p.mu.Lock()
		d, ok = p.exports[name]
		p.mu.Unlock()
		return d, ok
	}
}

// announce tells the remote of an export made after its handshake (b: an
// encoded wire.Export), when it takes them.
func (p *Peer) announce(b []byte) {
	if !p.exportsLive.Load() {
		return
	}
	a, ok := p.current().(transport.Announcer)
	if !ok {
		return
	}
	if err := a.AnnounceExport(b); err != nil {
		p.e.log.Debug("export not told to peer", "peer", p, "err", err)
	}
}

// Down returns a channel that is closed when the peer's current connection
// fails or the peer is closed. A peer this engine dialed reconnects on its
// next operation; call Down again to watch the new connection. (Its
// connection also closes, after its operations ended, when the peer moves
// back to a better transport it had lost: Transport says which is current.) A peer that
// dialed this engine cannot reconnect: once its connection fails, the engine
// releases the connection's resources and drops it from Peers, and its
// operations fail with the link's error. Before the
// first connection, Down returns a channel that is already closed.
func (p *Peer) Down() <-chan struct{} {
	if ep := p.current(); ep != nil {
		return ep.Done()
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Close closes the connection; operations in flight fail with an error
// matching ErrClosed. Idempotent.
func (p *Peer) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.done)
	var err error
	if ep := p.current(); ep != nil {
		err = ep.Close()
	}
	p.e.removePeer(p)
	return err
}

// markRevokes notes the engine's revoke count before a connection starts:
// setEndpoint replays later revokes to the new endpoint.
func (p *Peer) markRevokes() {
	p.e.mu.Lock()
	p.mark.Store(p.e.revokes.Seq())
	p.e.mu.Unlock()
}

func (p *Peer) setEndpoint(ep transport.Endpoint) *epBox {
	b := &epBox{ep: ep}
	if m := p.e.metrics; m != nil {
		b.conn = m.NewConn(ep, p.stats.Conn())
		p.stats.Publish(b.conn)
	}
	p.stats.upSince.Store(time.Now().UnixNano())
	p.ep.Store(b)
	p.e.replayRevokes(p, ep)
	return b
}

// watch releases ep's resources (its queue pairs, rings, buffers and
// goroutines) as soon as it fails, rather than when the peer is next used or
// closed: a peer that went away may never be used again. A peer this engine
// accepted cannot reconnect, so it also leaves the engine's peers (unless
// its dialer resumed it on another connection meanwhile); its operations
// keep failing with the link's error. A dialed peer dials again on its next
// operation.
func (p *Peer) watch(ep transport.Endpoint) {
	go func() {
		select {
		case <-ep.Done():
			ep.Close()
			p.tokens.Delete(ep)
			if p.dialAddr == "" && p.current() == ep {
				p.e.removePeer(p)
			}
			p.lost(ep)
		case <-p.done:
			// The peer closed. Peer.Close closes its current endpoint;
			// this one may have been replaced meanwhile (a reconnect) and
			// not be current: close it too, or its resources (shm's
			// pidfd, rdma's QPs) outlive the engine. Close is idempotent.
			ep.Close()
			p.tokens.Delete(ep)
		}
	}()
}

// lost reports the failure of p's connection ep to Engine.WaitNotify,
// unless p was closed here, the engine is closing, p's notifications go to
// a handler (Peer.HandleNotify), or a move retired ep on purpose (a move
// back to a paused transport, or a resumed peer, replaced it: it is closed
// once drained). A connection that failed is reported even when a
// reconnection already replaced it.
func (p *Peer) lost(ep transport.Endpoint) {
	select {
	case <-p.done:
		return
	default:
	}
	if p.e.ctx.Err() != nil || p.notify.Load() != nil {
		return
	}
	if _, ok := p.retired.Load(ep); ok {
		return
	}
	err := ep.Err()
	if r := p.stall.Load(); r != nil && r.ep == ep {
		err = &StallError{Op: "wait notify", Peer: p.String(), Timeout: r.timeout, Pending: r.pending, Cause: err}
	}
	p.e.notes.Lost(p, err)
}

// startDraining makes old, the connection a move replaces, the peer's
// draining one: revokes reach it too while it drains (call it before the
// swap, so that none falls in between), and its end is no loss to report
// (retired). One still draining from an earlier move is closed now.
func (p *Peer) startDraining(old transport.Endpoint) *transport.Endpoint {
	p.retired.Store(old, struct{}{})
	d := &old
	if prev := p.draining.Swap(d); prev != nil {
		(*prev).Close()
	}
	return d
}

// drainMax bounds how long a connection a move replaced (the lesser one,
// on a move back) is kept for the operations posted on it before it is
// closed anyway (those still outstanding then fail; READs and WRITEs are
// repeated).
const drainMax = 30 * time.Second

// retire closes ep, a connection the peer no longer posts on, once the
// operations posted on it have ended (or after drainMax).
func (p *Peer) retire(ep transport.Endpoint) {
	e := p.e
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		ep.Close()
		p.draining.Store(nil)
		return
	}
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		defer func() {
			ep.Close()
			if d := p.draining.Load(); d != nil && *d == ep {
				p.draining.CompareAndSwap(d, nil)
			}
		}()
		pr, ok := ep.(transport.Progresser)
		deadline := time.Now().Add(drainMax)
		// An operation may have taken the old connection just before the
		// swap and not posted yet: give it a moment.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; time.Now().Before(deadline); n++ {
			select {
			case <-tick.C:
			case <-ep.Done():
				return
			case <-e.ctx.Done():
				return
			}
			if n < 10 {
				continue
			}
			if !ok {
				return // no count to wait for: a tenth of a second it was
			}
			if _, pending := pr.Progress(); pending == 0 {
				return
			}
		}
	}()
}

package xfer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/negotiate"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// The engine's side of the handshake: internal/handshake moves and checks
// the messages (hello, challenge, auth, welcome, joins); the engine
// chooses the transport, finds or makes the peer, and connects it.

// newNegotiate builds the engine's choice of transports (internal/negotiate)
// from its transport table, policy and allowed GIDs; refusals and
// fallbacks are counted and logged here.
func (e *Engine) newNegotiate(extra string) *negotiate.Table {
	gids, _ := parseGIDs(e.cfg.Security.RDMA.AllowedGIDs) // checked by withDefaults
	return &negotiate.Table{
		Names: transportNames(), Transports: e.transports, Extra: extra, Policy: string(e.cfg.Transport), AllowedGIDs: gids,
		PeerGIDs: func(name string) func([]byte) ([][16]byte, error) {
			if r := transportRowOf(name); r != nil {
				return r.peerGIDs
			}
			return nil
		},
		Available:  e.available,
		NotAllowed: func(peer string, err error) { e.AuthFailed(PlanePeer, ReasonNotAllowed, peer, err) },
		FellBack: func(peer, name string, full bool, err error) {
			if full {
				e.fellBack(peer, name, metrics.ReasonFull, err.Error(), "transport has no room for another peer; falling back", "transport", name, "reason", err)
			} else {
				e.fellBack(peer, name, metrics.ReasonUnusable, err.Error(), "transport not usable for peer; falling back", "transport", name, "reason", err)
			}
		},
		Log: e.log,
	}
}

func (e *Engine) acceptLoop() {
	defer e.wg.Done()
	for {
		nc, err := e.ln.Accept()
		if err != nil {
			if e.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			e.log.Error("accept failed; no longer accepting peers", "err", err)
			return
		}
		if !e.allowedPeers.Allows(nc.RemoteAddr()) {
			e.AuthFailed(PlanePeer, ReasonNotAllowed, nc.RemoteAddr().String(), errors.New("address not in security.allowed_peers"))
			nc.Close()
			continue
		}
		e.acceptedCongestion(nc)
		ticket := e.pending.Admit(nc)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			err := e.serveConn(nc, ticket)
			ticket.Leave()
			if err != nil {
				var af *handshake.AuthError
				if errors.As(err, &af) && e.ctx.Err() == nil {
					e.AuthFailed(PlanePeer, af.Reason, nc.RemoteAddr().String(), err)
				} else {
					e.log.Info("inbound connection refused", "remote", nc.RemoteAddr().String(), "err", err)
				}
				nc.Close() // after the refusal is counted
			}
		}()
	}
}

// serveConn runs the acceptor's side of a handshake, or a join. On an
// error the caller closes nc.
func (e *Engine) serveConn(nc net.Conn, ticket *admit.Ticket) error {
	// Close must not wait a whole handshake timeout for a silent peer.
	stop := context.AfterFunc(e.ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	in := handshake.Accept(nc, ticket, e.cfg.HandshakeTimeout, e.cfg.Secret)
	j, h, body, err := in.First(e.ctx)
	if err != nil {
		return err
	}
	if j != nil {
		e.mu.Lock()
		ch := e.joins[j.Token]
		e.mu.Unlock()
		if err := in.AnswerJoin(ch != nil); err != nil {
			return err
		}
		select {
		case ch <- nc:
			return nil
		default:
			return errors.New("join: no connection expected")
		}
	}
	if e.cfg.Secret == "" {
		in.Admitted() // a hello is all there is to read
	}
	if err := e.holdUntilReady(nc, in.Deadline()); err != nil {
		return err
	}
	p, err := e.acceptPeer(in, h, body)
	if errors.Is(err, errResumed) {
		return nil
	}
	if err != nil {
		return err
	}
	select {
	case e.accepted <- p:
	default:
		e.log.Warn("accept queue full: peer works but Accept will not return it", "peer", p)
	}
	return nil
}

// holdUntilReady holds a dialer's hello until the engine is ready (Ready,
// Config.HoldPeers), within the handshake's deadline, and refuses it as
// not ready after that.
func (e *Engine) holdUntilReady(nc net.Conn, until time.Time) error {
	if e.isReady() {
		return nil
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-e.ready:
		return nil
	case <-e.ctx.Done():
		return fmt.Errorf("engine closed before it was ready: %w", ErrClosed)
	case <-t.C:
		nc.SetWriteDeadline(time.Now().Add(time.Second)) // the handshake's deadline passed: time for the refusal
		return handshake.Refuse(nc, wire.StatusInternal, "the engine is not ready: it is still starting (nothing called Ready within handshake_timeout %v)", e.cfg.HandshakeTimeout)
	}
}

func (e *Engine) acceptPeer(in *handshake.Inbound, h *wire.Hello, helloBody []byte) (*Peer, error) {
	nc := in.Conn
	caps := wire.CapAuth | wire.CapNotify | wire.CapAttach | wire.CapExports
	if e.cfg.HoldPeers {
		caps |= wire.CapReady // holdUntilReady let the hello through: the owner called Ready
	}
	if _, err := in.Challenge(e.ctx, h, helloBody, caps); err != nil {
		return nil, err
	}
	local := transport.PeerInfo{ID: e.id, PID: os.Getpid(), HostID: e.hostID, Addr: e.addr}
	remote := transport.PeerInfo{ID: h.ID, PID: int(h.PID), HostID: h.HostID, Addr: h.Listen}
	t, reason := e.negotiate.Choose(h, local, remote)
	if t == nil {
		return nil, handshake.Refuse(nc, wire.StatusNoTransport, "no usable transport: %s", reason)
	}
	remote.Blob = negotiate.Blob(h, t.Name())
	conns := 1
	if e.caps(t.Name()).Streams {
		conns = clamp(int(h.Conns), 1, e.cfg.TCP.Conns)
	}
	w := wire.Welcome{ID: e.id, HostID: e.hostID, PID: uint32(os.Getpid()), Transport: t.Name(), Blob: t.LocalBlob(), Conns: uint16(conns),
		MaxMessage: uint32(min(int(h.MaxMessage), e.cfg.MaxMessage)), RecvDepth: uint32(min(int(h.RecvDepth), e.cfg.RecvDepth)), Listen: e.addr}
	if w.MaxMessage == 0 || w.RecvDepth == 0 {
		return nil, handshake.Refuse(nc, wire.StatusBadRequest, "max message and receive depth must be positive")
	}
	if _, err := rand.Read(w.Token[:]); err != nil {
		return nil, err
	}
	e.exportMu.RLock()
	w.Exports = append(w.Exports, e.exports...)
	exportN := e.exportN
	e.exportMu.RUnlock()
	joins := make(chan net.Conn, conns)
	e.mu.Lock()
	e.joins[w.Token] = joins
	e.mu.Unlock()
	// The token stays valid while the endpoint lives: a transport may take
	// an extra connection later (an rdma rail coming back).
	kept := false
	defer func() {
		if !kept {
			e.dropJoins(w.Token, joins)
		}
	}()
	if err := in.Welcome(&w); err != nil {
		return nil, err
	}
	// A dialer that resumes (its probe of a transport it lost) names the
	// Welcome token of its current connection: the new connection goes
	// under that connection's peer, which keeps serving meanwhile.
	var p *Peer
	if h.Caps&wire.CapResume != 0 {
		if p = e.resumable(h.Resume, h.ID); p != nil {
			p.markRevokes() // revokes from here on are replayed to the new endpoint
		}
	}
	resumed := p != nil
	if !resumed {
		p = e.newPeer("", remote)
	}
	p.exportsLive.Store(h.Caps&wire.CapExports != 0)
	p.exportMark.Store(exportN) // addPeer sends the exports made since
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	ep, err := t.Connect(ctx, transport.Params{
		Role: transport.Acceptor, Conn: nc, Local: local, Remote: remote, Host: p.host(),
		Conns: conns, MaxMessage: int(w.MaxMessage), RecvDepth: int(w.RecvDepth), PollSpin: e.cfg.TCP.PollSpin, Logger: e.log,
		OnFailover: p.failoverHook(Policy(negotiate.AcceptedPolicy(h.Policy, string(e.cfg.Transport)))),
		AcceptExtra: func(ctx context.Context) (net.Conn, error) {
			select {
			case c := <-joins:
				return c, nil
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for the peer's extra connection: %w", ctx.Err())
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("accept: %w", namedErr(t.Name(), err))
	}
	var was string
	if old := p.current(); resumed && old != nil {
		was = old.Transport()
		d := p.startDraining(old) // the dialer closes it once drained
		go func() {
			select {
			case <-old.Done():
			case <-p.done:
			}
			p.draining.CompareAndSwap(d, nil)
		}()
	}
	p.setEndpoint(ep)
	if err := e.addPeer(p); err != nil {
		ep.Close()
		return nil, err
	}
	p.watch(ep)
	kept = true
	e.mu.Lock()
	e.resumes[w.Token] = p
	e.mu.Unlock()
	go func() {
		<-ep.Done()
		e.dropJoins(w.Token, joins)
		e.mu.Lock()
		delete(e.resumes, w.Token)
		e.mu.Unlock()
	}()
	if resumed {
		// The dialer closes the connection this one replaces once its
		// operations ended; Accept does not return the peer again.
		e.log.Info("peer resumed on a new connection", "peer", p, "transport", t.Name(), "was", was)
		return p, errResumed
	}
	e.log.Debug("peer accepted", "peer", p, "transport", t.Name())
	return p, nil
}

// errResumed is acceptPeer's answer for a connection that went under a
// peer Accept already returned.
var errResumed = errors.New("resumed")

// resumable is the accepted peer whose connection's Welcome carried
// token, when it is open and its engine is id; else nil.
func (e *Engine) resumable(token [16]byte, id [16]byte) *Peer {
	e.mu.Lock()
	p := e.resumes[token]
	e.mu.Unlock()
	if p == nil || p.isClosed() || p.ID() != ID(id) {
		return nil
	}
	return p
}

// dropJoins forgets a join token and closes the connections that joined
// with it and were not taken.
func (e *Engine) dropJoins(token [16]byte, joins chan net.Conn) {
	e.mu.Lock()
	delete(e.joins, token)
	e.mu.Unlock()
	for {
		select {
		case c := <-joins:
			c.Close()
		default:
			return
		}
	}
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// connect dials addr and runs the dialer's side of the handshake. When the
// transport chosen cannot be brought up from this side under the auto
// policy (ErrNotSupported, or transport.ErrNoRoom: its device has no room
// for another peer), it dials again without it.
func (e *Engine) connect(ctx context.Context, p *Peer) (transport.Endpoint, error) {
	exclude := map[string]error{}
	prev := ""
	if old := p.current(); old != nil {
		prev = old.Transport()
	}
	retries, redials := 0, 0
	start := time.Now()
	for {
		ep, name, err := e.connectOnce(ctx, p, exclude, "")
		if errors.Is(err, handshake.ErrDropped) && ctx.Err() == nil && time.Since(start) < e.cfg.HandshakeTimeout {
			// Dropped before the welcome, as a listener flooded with
			// strays drops the oldest: dial again, within one
			// handshake_timeout in all.
			redials++
			if redials == 1 {
				e.log.Info("the peer dropped the handshake; dialing again", "peer", p.dialAddr, "reason", err)
			}
			select {
			case <-time.After(handshake.Backoff(redials)):
				continue
			case <-ctx.Done():
				return nil, handshake.CtxErr(ctx, err)
			}
		}
		if errors.Is(err, transport.ErrTransient) && retries < setupRetries && ctx.Err() == nil {
			retries++
			e.setupRetried(name)
			e.log.Info("connection setup failed; trying again", "peer", p.dialAddr, "transport", name, "attempt", retries+1, "reason", err)
			select {
			case <-time.After(time.Duration(retries) * 20 * time.Millisecond):
				continue
			case <-ctx.Done():
				return nil, handshake.CtxErr(ctx, err)
			}
		}
		if err == nil {
			// A peer that had a better transport and reconnects on a lesser
			// one (its rdma device was removed, say) fell back too.
			if len(exclude) == 0 && p.policy == PolicyAuto && prev != "" && rank(ep.Transport()) > rank(prev) {
				e.fellBack(p.dialAddr, prev, metrics.ReasonReconnected, "reconnected on "+ep.Transport(), "peer reconnected on a lesser transport; falling back", "had", prev, "now", ep.Transport())
			}
			return ep, nil
		}
		if retries > 0 {
			err = fmt.Errorf("%w (attempt %d)", err, retries+1)
		}
		full := errors.Is(err, transport.ErrNoRoom)
		if name == "" || p.policy != PolicyAuto || !errors.Is(err, ErrNotSupported) && !full || exclude[name] != nil {
			return nil, err
		}
		if full {
			// This side's device has no room for the peer (rdma's
			// completion queues are full): the next transport takes it.
			e.fellBack(p.dialAddr, name, metrics.ReasonFull, err.Error(), "transport has no room for another peer; falling back", "transport", name, "reason", err)
		} else {
			e.fellBack(p.dialAddr, name, metrics.ReasonSetupFailed, err.Error(), "transport failed to come up; falling back", "transport", name, "reason", err)
		}
		exclude[name] = err
	}
}

// setupRetries is how many times a dialer tries again after a transient
// setup failure (transport.ErrTransient) before it gives up.
const setupRetries = 2

// connectOnce dials p once, offering what p's policy allows less exclude,
// or, when only is set, that transport alone (a paused transport's probe).
func (e *Engine) connectOnce(ctx context.Context, p *Peer, exclude map[string]error, only string) (ep transport.Endpoint, tname string, err error) {
	addr := p.dialAddr
	var offers []wire.TransportOffer
	if only != "" {
		offers, err = e.negotiate.Offer(only)
	} else {
		offers, err = e.negotiate.Offers(string(p.policy), exclude)
	}
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	d := net.Dialer{Control: e.dialControl}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: %w", addr, err)
	}
	defer func() {
		if err != nil && nc != nil {
			nc.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// The hello names the peer's policy, also for a probe that offers a
	// paused transport alone: the acceptor lets the connection fail over
	// inside itself (OnFailover) only under auto.
	hello := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, Caps: wire.CapAuth | wire.CapNotify | wire.CapAttach | wire.CapExports,
		ID: e.id, HostID: e.hostID, PID: uint32(os.Getpid()), Policy: string(p.policy),
		Conns: uint16(e.cfg.TCP.Conns), MaxMessage: uint32(e.cfg.MaxMessage), RecvDepth: uint32(e.cfg.RecvDepth),
		Listen: e.addr, Transports: offers}
	if only != "" {
		// A probe of a paused transport asks the acceptor to put the
		// new connection under the peer of the current one.
		if cur := p.current(); cur != nil {
			if tok, ok := p.tokens.Load(cur); ok {
				hello.Caps |= wire.CapResume
				hello.Resume = tok.([16]byte)
			}
		}
	}
	ch, w, err := handshake.Dial(ctx, nc, addr, &hello, e.cfg.Secret)
	if err != nil {
		return nil, "", err
	}
	t := e.transports[w.Transport]
	if t == nil || exclude[w.Transport] != nil || !negotiate.Offered(&hello, w.Transport) {
		return nil, "", fmt.Errorf("dial %s: %w: peer chose transport %q, which was not offered", addr, ErrProtocol, w.Transport)
	}
	if w.Conns < 1 || int(w.Conns) > e.cfg.TCP.Conns && e.caps(w.Transport).Streams || w.MaxMessage == 0 || w.RecvDepth == 0 {
		return nil, "", fmt.Errorf("dial %s: %w: bad welcome parameters", addr, ErrProtocol)
	}
	if err := e.negotiate.GIDAllowed(w.Transport, w.Blob); err != nil {
		e.AuthFailed(PlanePeer, ReasonNotAllowed, addr, err)
		return nil, w.Transport, fmt.Errorf("dial %s: %w: %w", addr, ErrNotSupported, err)
	}
	nc.SetDeadline(time.Time{})
	local := transport.PeerInfo{ID: e.id, PID: os.Getpid(), HostID: e.hostID, Addr: e.addr}
	remote := transport.PeerInfo{ID: w.ID, PID: int(w.PID), HostID: w.HostID, Addr: addr, Blob: w.Blob}
	p.setRemote(remote, w.Exports, ch.Caps&wire.CapReady != 0)
	p.exportsLive.Store(ch.Caps&wire.CapExports != 0)
	ep, err = t.Connect(ctx, transport.Params{
		Role: transport.Dialer, Conn: nc, Local: local, Remote: remote, Host: p.host(),
		Conns: int(w.Conns), MaxMessage: int(w.MaxMessage), RecvDepth: int(w.RecvDepth), PollSpin: e.cfg.TCP.PollSpin, Logger: e.log,
		OnFailover: p.failoverHook(p.policy),
		DialExtra:  func(ctx context.Context) (net.Conn, error) { return e.join(ctx, addr, w.Token) },
	})
	nc = nil // Connect owns it now, on success and on failure
	if err != nil {
		return nil, w.Transport, fmt.Errorf("dial %s: %w", addr, namedErr(w.Transport, err))
	}
	p.tokens.Store(ep, w.Token)
	return ep, w.Transport, nil
}

// namedErr prefixes a transport's error with its name, unless it has it.
func namedErr(name string, err error) error {
	if strings.HasPrefix(err.Error(), name+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// join opens one more connection to an established peer.
func (e *Engine) join(ctx context.Context, addr string, token [16]byte) (net.Conn, error) {
	return handshake.Join(ctx, &net.Dialer{Control: e.dialControl}, addr, token)
}

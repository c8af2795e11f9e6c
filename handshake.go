package xfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// The handshake with a secret (protocol version 2):
//
//	dialer   → hello      versions, identity, nonce, transports offered
//	acceptor → challenge  version, caps, a random nonce, whether auth is required
//	dialer   → auth       HMAC(secret, dialer label | transcript)
//	acceptor → welcome    identity, transport, exports, and
//	                      HMAC(secret, acceptor label | transcript | welcome)
//
// where the transcript is SHA-256 over the hello's and the challenge's
// bodies. The dialer proves first, and the acceptor sends nothing derived
// from the secret, nor its engine ID, host ID or PID, before that proof
// checks: a scanner learns a nonce and that a secret is required. The
// acceptor's proof covers the welcome, so a man in the middle cannot
// change the transport, the blobs or the exports it carries.
//
// The dialer's proof goes to whoever listens at the address it dialed,
// which a forged directory entry can choose. A proof is worthless offline
// only if the secret cannot be guessed, so a secret has at least
// MinSecretLen bytes (128 bits when random; `xfer secret` makes 256).
// A PAKE (CPace, SPAKE2) would make weak secrets safe too, but no Go module
// we would trust for it is maintained today: x/crypto has none.
const (
	labelDialer   = "xfer-v2 dialer proof"
	labelAcceptor = "xfer-v2 acceptor proof"
)

// transcript hashes the hello's and the challenge's bodies.
func transcript(hello, challenge []byte) [32]byte { return auth.Transcript(hello, challenge) }

// proof is HMAC-SHA256(secret, label | transcript | more): the labels keep
// one side's proof from being replayed as the other's, the transcript's
// nonces keep it from being replayed on another connection.
func proof(secret, label string, th [32]byte, more []byte) (out [32]byte) {
	auth.NewKey([]byte(secret)).Sum(out[:0], label, th[:], more)
	return out
}

// welcomeProof is the acceptor's proof over a welcome's body, whose Proof
// field is ignored (taken as zero).
func welcomeProof(secret string, th [32]byte, body []byte) [32]byte {
	b := bytes.Clone(body)
	if len(b) >= wire.WelcomeProofOffset+32 {
		clear(b[wire.WelcomeProofOffset : wire.WelcomeProofOffset+32])
	}
	return proof(secret, labelAcceptor, th, b)
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
				var af *authError
				if errors.As(err, &af) && e.ctx.Err() == nil {
					e.AuthFailed(PlanePeer, af.reason, nc.RemoteAddr().String(), err)
				} else {
					e.log.Info("inbound connection refused", "remote", nc.RemoteAddr().String(), "err", err)
				}
				nc.Close() // after the refusal is counted
			}
		}()
	}
}

// inbound is an inbound connection in its handshake: its place in the
// gate of pending connections (security.max_pending_handshakes), which it
// leaves once it has authenticated, and its deadline.
type inbound struct {
	nc       net.Conn
	ticket   *admit.Ticket
	deadline time.Time
}

// admitted takes the connection out of the gate, its handshake's reads
// done: an eviction from here on cannot touch it, and one that came just
// before is undone (its reads succeeded: the peer is not dropped).
func (in *inbound) admitted() {
	in.ticket.Leave()
	in.nc.SetDeadline(in.deadline)
}

// failed is err, a failure of the connection's handshake before it was
// admitted: an eviction, when the gate evicted it.
func (in *inbound) failed(err error) error {
	if in.ticket.Evicted() {
		return &authError{ReasonEvicted, fmt.Errorf("dropped in its handshake for a newer connection (security.max_pending_handshakes, max_pending_per_source): %w", err)}
	}
	return err
}

// serveConn runs the acceptor's side of a handshake, or a join. On an
// error the caller closes nc.
func (e *Engine) serveConn(nc net.Conn, ticket *admit.Ticket) error {
	// Close must not wait a whole handshake timeout for a silent peer.
	stop := context.AfterFunc(e.ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	in := &inbound{nc: nc, ticket: ticket, deadline: time.Now().Add(e.cfg.HandshakeTimeout)}
	nc.SetDeadline(in.deadline)
	if ticket.Evicted() { // an eviction's deadline, which this one replaced
		return in.failed(errors.New("evicted before its hello"))
	}
	typ, body, err := wire.ReadMessage(nc)
	switch {
	case err == nil:
	case e.ctx.Err() != nil:
		return err // Close
	case ticket.Evicted():
		return in.failed(err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &authError{ReasonTimeout, fmt.Errorf("no hello within handshake_timeout %v", e.cfg.HandshakeTimeout)}
	case errors.Is(err, wire.ErrMalformed):
		return &authError{ReasonMalformed, err}
	default:
		// A connection closed without a word (a port check).
		return &authError{ReasonNoProof, fmt.Errorf("closed before its hello: %w", err)}
	}
	switch typ {
	case wire.MsgJoin:
		j, err := wire.DecodeJoin(body)
		if err != nil {
			return &authError{ReasonMalformed, err}
		}
		e.mu.Lock()
		ch := e.joins[j.Token]
		e.mu.Unlock()
		if ch == nil {
			nc.Write(wire.AppendResult(nil, &wire.Result{Status: wire.StatusBadRequest, Message: "join: unknown token"}))
			return &authError{ReasonBadProof, errors.New("join with an unknown token")}
		}
		in.admitted()
		if _, err := nc.Write(wire.AppendResult(nil, &wire.Result{Status: wire.StatusOK})); err != nil {
			return err
		}
		nc.SetDeadline(time.Time{})
		select {
		case ch <- nc:
			return nil
		default:
			return errors.New("join: no connection expected")
		}
	case wire.MsgHello:
		h, err := wire.DecodeHello(body)
		if err != nil {
			return &authError{ReasonMalformed, err}
		}
		if e.cfg.Secret == "" {
			in.admitted() // a hello is all there is to read
		}
		if err := e.holdUntilReady(nc, in.deadline); err != nil {
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
	default:
		return &authError{ReasonMalformed, fmt.Errorf("%w: first message is type %d, not hello or join", ErrProtocol, typ)}
	}
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
		return refuse(nc, wire.StatusInternal, "the engine is not ready: it is still starting (nothing called Ready within handshake_timeout %v)", e.cfg.HandshakeTimeout)
	}
}

func refuse(nc net.Conn, st wire.Status, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	nc.Write(wire.AppendResult(nil, &wire.Result{Status: st, Message: msg}))
	return errors.New(msg)
}

func (e *Engine) acceptPeer(in *inbound, h *wire.Hello, helloBody []byte) (*Peer, error) {
	nc := in.nc
	if h.MaxVersion < wire.VersionMin || h.MinVersion > wire.VersionMax {
		return nil, refuse(nc, wire.StatusVersion, "peer speaks protocol versions %d-%d, this engine %d-%d", h.MinVersion, h.MaxVersion, wire.VersionMin, wire.VersionMax)
	}
	version := min(h.MaxVersion, wire.VersionMax)
	// The challenge carries nothing but a fresh nonce and constants.
	ch := wire.Challenge{Version: version, Caps: wire.CapAuth | wire.CapNotify | wire.CapAttach | wire.CapExports, AuthRequired: e.cfg.Secret != ""}
	if e.cfg.HoldPeers {
		ch.Caps |= wire.CapReady // holdUntilReady let the hello through: the owner called Ready
	}
	if _, err := rand.Read(ch.Nonce[:]); err != nil {
		return nil, err
	}
	chMsg := wire.AppendChallenge(nil, &ch)
	if _, err := nc.Write(chMsg); err != nil {
		return nil, in.failed(err)
	}
	th := transcript(helloBody, chMsg[wire.HandshakeHeaderLen:])
	if e.cfg.Secret != "" {
		typ, body, err := wire.ReadMessage(nc)
		if err != nil {
			if in.ticket.Evicted() && e.ctx.Err() == nil {
				return nil, in.failed(err)
			}
			reason := ReasonNoProof
			if errors.Is(err, os.ErrDeadlineExceeded) {
				reason = ReasonTimeout
			}
			return nil, &authError{reason, fmt.Errorf("auth: %w", err)}
		}
		if typ != wire.MsgAuth {
			refuse(nc, wire.StatusAuthFailed, "this engine requires authentication: configure the shared secret")
			return nil, &authError{ReasonNoProof, fmt.Errorf("auth: message type %d instead of a proof", typ)}
		}
		a, err := wire.DecodeAuth(body)
		if err != nil {
			return nil, &authError{ReasonMalformed, err}
		}
		if want := proof(e.cfg.Secret, labelDialer, th, nil); !auth.Equal(a.Proof[:], want[:]) {
			refuse(nc, wire.StatusAuthFailed, "authentication failed: wrong secret")
			return nil, &authError{ReasonBadProof, errors.New("authentication failed: wrong secret")}
		}
		in.admitted()
	}
	local := transport.PeerInfo{ID: e.id, PID: os.Getpid(), HostID: e.hostID, Addr: e.addr}
	remote := transport.PeerInfo{ID: h.ID, PID: int(h.PID), HostID: h.HostID, Addr: h.Listen}
	t, reason := e.choose(h, local, remote)
	if t == nil {
		return nil, refuse(nc, wire.StatusNoTransport, "no usable transport: %s", reason)
	}
	remote.Blob = offerBlob(h, t.Name())
	conns := 1
	if e.caps(t.Name()).Streams {
		conns = clamp(int(h.Conns), 1, e.cfg.TCP.Conns)
	}
	w := wire.Welcome{ID: e.id, HostID: e.hostID, PID: uint32(os.Getpid()), Transport: t.Name(), Blob: t.LocalBlob(), Conns: uint16(conns),
		MaxMessage: uint32(min(int(h.MaxMessage), e.cfg.MaxMessage)), RecvDepth: uint32(min(int(h.RecvDepth), e.cfg.RecvDepth)), Listen: e.addr}
	if w.MaxMessage == 0 || w.RecvDepth == 0 {
		return nil, refuse(nc, wire.StatusBadRequest, "max message and receive depth must be positive")
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
	wm := wire.AppendWelcome(nil, &w)
	if e.cfg.Secret != "" {
		p := welcomeProof(e.cfg.Secret, th, wm[wire.HandshakeHeaderLen:])
		copy(wm[wire.HandshakeHeaderLen+wire.WelcomeProofOffset:], p[:])
	}
	if _, err := nc.Write(wm); err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Time{})
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
		OnFailover: p.failoverHook(acceptedPolicy(h.Policy, e.cfg.Transport)),
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

// peerName names an inbound peer in logs: the address it listens on, or its
// engine ID when it does not listen.
func peerName(p transport.PeerInfo) string {
	if p.Addr != "" {
		return p.Addr
	}
	return ID(p.ID).String()
}

// acceptedPolicy is the policy an accepted connection follows: auto when
// both the dialer's (its hello's) and this engine's are auto.
func acceptedPolicy(hello string, own Policy) Policy {
	if hello == string(PolicyAuto) && own == PolicyAuto {
		return PolicyAuto
	}
	return Policy(hello)
}

// choose picks the transport for an inbound peer: the dialer's preference
// order, restricted by this engine's policy and what both can use.
func (e *Engine) choose(h *wire.Hello, local, remote transport.PeerInfo) (transport.Transport, string) {
	var reasons []string
	for _, o := range h.Transports {
		t := e.transports[o.Name]
		if t == nil {
			reasons = append(reasons, o.Name+": unknown")
			continue
		}
		if e.cfg.Transport != PolicyAuto && Policy(o.Name) != e.cfg.Transport && o.Name != e.extra {
			reasons = append(reasons, fmt.Sprintf("%s: this engine's policy is %s", o.Name, e.cfg.Transport))
			continue
		}
		if err := t.Available(); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", o.Name, err))
			e.log.Debug("a transport the peer offered is not available here", "peer", peerName(remote), "transport", o.Name, "reason", err)
			continue
		}
		if err := e.gidAllowed(o.Name, o.Blob); err != nil {
			reasons = append(reasons, err.Error())
			e.AuthFailed(PlanePeer, ReasonNotAllowed, peerName(remote), err)
			continue
		}
		r := remote
		r.Blob = o.Blob
		if err := t.Usable(local, r); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", o.Name, err))
			if h.Policy != string(PolicyAuto) {
				continue
			}
			if errors.Is(err, transport.ErrNoRoom) {
				// The device is full (rdma's completion queues): the peer
				// gets the next transport, as if this one could not reach it.
				e.fellBack(peerName(remote), o.Name, metrics.ReasonFull, err.Error(), "transport has no room for another peer; falling back", "transport", o.Name, "reason", err)
			} else {
				e.fellBack(peerName(remote), o.Name, metrics.ReasonUnusable, err.Error(), "transport not usable for peer; falling back", "transport", o.Name, "reason", err)
			}
			continue
		}
		return t, ""
	}
	if len(reasons) == 0 {
		return nil, "the peer offered no transport"
	}
	return nil, fmt.Sprint(reasons)
}

func offerBlob(h *wire.Hello, name string) []byte {
	for _, o := range h.Transports {
		if o.Name == name {
			return o.Blob
		}
	}
	return nil
}

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// offers lists the transports to propose, best first, under policy.
func (e *Engine) offers(policy Policy, exclude map[string]error) ([]wire.TransportOffer, error) {
	names := []string{string(policy)}
	if policy == PolicyAuto {
		names = transportNames()
	}
	if e.extra != "" {
		names = append([]string{e.extra}, names...)
	}
	var out []wire.TransportOffer
	var errs []error
	for _, n := range names {
		if err := exclude[n]; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		t := e.transports[n]
		if err := e.available(t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			e.log.Debug("a transport is not available: not offered", "transport", n, "reason", err)
			continue
		}
		out = append(out, wire.TransportOffer{Name: n, Blob: t.LocalBlob()})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w under policy %s: %w", ErrNoTransport, policy, errors.Join(errs...))
	}
	return out, nil
}

// offer is the offer of transport name alone.
func (e *Engine) offer(name string) ([]wire.TransportOffer, error) {
	t := e.transports[name]
	if t == nil {
		return nil, fmt.Errorf("%w: no transport %q", ErrNoTransport, name)
	}
	if err := e.available(t); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []wire.TransportOffer{{Name: name, Blob: t.LocalBlob()}}, nil
}

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
		if errors.Is(err, errDropped) && ctx.Err() == nil && time.Since(start) < e.cfg.HandshakeTimeout {
			// Dropped before the welcome, as a listener flooded with
			// strays drops the oldest: dial again, within one
			// handshake_timeout in all.
			redials++
			if redials == 1 {
				e.log.Info("the peer dropped the handshake; dialing again", "peer", p.dialAddr, "reason", err)
			}
			select {
			case <-time.After(min(time.Duration(redials)*10*time.Millisecond, 200*time.Millisecond)):
				continue
			case <-ctx.Done():
				return nil, ctxErr(ctx, err)
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
				return nil, ctxErr(ctx, err)
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
	policy := p.policy
	var offers []wire.TransportOffer
	if only != "" {
		policy = Policy(only)
		offers, err = e.offer(only)
	} else {
		offers, err = e.offers(policy, exclude)
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
	if _, err := rand.Read(hello.Nonce[:]); err != nil {
		return nil, "", err
	}
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
	helloMsg := wire.AppendHello(nil, &hello)
	if _, err := nc.Write(helloMsg); err != nil {
		return nil, "", fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, err))
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, ctxErr(ctx, err)))
	}
	if typ == wire.MsgResult {
		return nil, "", resultErr(addr, body)
	}
	if typ != wire.MsgChallenge {
		return nil, "", fmt.Errorf("dial %s: %w: expected challenge, got message type %d", addr, ErrProtocol, typ)
	}
	ch, err := wire.DecodeChallenge(body)
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: %w", addr, err)
	}
	if ch.Version < wire.VersionMin || ch.Version > wire.VersionMax {
		return nil, "", fmt.Errorf("dial %s: %w: peer chose version %d", addr, ErrVersion, ch.Version)
	}
	th := transcript(helloMsg[wire.HandshakeHeaderLen:], body)
	switch {
	case ch.AuthRequired && e.cfg.Secret == "":
		return nil, "", fmt.Errorf("dial %s: %w: the peer requires a shared secret; set secret_file (or secret) in the config, or XFER_SECRET", addr, ErrAuth)
	case !ch.AuthRequired && e.cfg.Secret != "":
		return nil, "", fmt.Errorf("dial %s: %w: the peer has no shared secret, and this side requires one", addr, ErrAuth)
	case e.cfg.Secret != "":
		a := wire.Auth{Proof: proof(e.cfg.Secret, labelDialer, th, nil)}
		if _, err := nc.Write(wire.AppendAuth(nil, &a)); err != nil {
			return nil, "", fmt.Errorf("dial %s: auth: %w", addr, dropped(ctx, err))
		}
	}
	typ, body, err = wire.ReadMessage(nc)
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, ctxErr(ctx, err)))
	}
	if typ == wire.MsgResult {
		return nil, "", resultErr(addr, body)
	}
	if typ != wire.MsgWelcome {
		return nil, "", fmt.Errorf("dial %s: %w: expected welcome, got message type %d", addr, ErrProtocol, typ)
	}
	if e.cfg.Secret != "" {
		want := welcomeProof(e.cfg.Secret, th, body)
		if len(body) < wire.WelcomeProofOffset+32 || !auth.Equal(body[wire.WelcomeProofOffset:wire.WelcomeProofOffset+32], want[:]) {
			return nil, "", fmt.Errorf("dial %s: %w: the peer could not prove it knows this side's shared secret (different secrets)", addr, ErrAuth)
		}
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil {
		return nil, "", fmt.Errorf("dial %s: %w", addr, err)
	}
	t := e.transports[w.Transport]
	if t == nil || exclude[w.Transport] != nil || !offered(&hello, w.Transport) {
		return nil, "", fmt.Errorf("dial %s: %w: peer chose transport %q, which was not offered", addr, ErrProtocol, w.Transport)
	}
	if w.Conns < 1 || int(w.Conns) > e.cfg.TCP.Conns && e.caps(w.Transport).Streams || w.MaxMessage == 0 || w.RecvDepth == 0 {
		return nil, "", fmt.Errorf("dial %s: %w: bad welcome parameters", addr, ErrProtocol)
	}
	if err := e.gidAllowed(w.Transport, w.Blob); err != nil {
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

// errDropped is a handshake (or a join) whose connection the acceptor
// closed before its welcome (its result): a listener busy with others
// (security.max_pending_*) evicts connections still in their handshake.
// The dialer dials again.
var errDropped = errors.New("the peer closed the connection before the handshake ended")

// dropped is err, a failure of a handshake's read or write, marked
// errDropped when the acceptor closed the connection.
func dropped(ctx context.Context, err error) error {
	if ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return fmt.Errorf("%w (%w)", errDropped, err)
	}
	return err
}

// namedErr prefixes a transport's error with its name, unless it has it.
func namedErr(name string, err error) error {
	if strings.HasPrefix(err.Error(), name+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

func offered(h *wire.Hello, name string) bool {
	for _, o := range h.Transports {
		if o.Name == name {
			return true
		}
	}
	return false
}

// join opens one more connection to an established peer.
func (e *Engine) join(ctx context.Context, addr string, token [16]byte) (net.Conn, error) {
	for redials := 1; ; redials++ {
		nc, err := e.joinOnce(ctx, addr, token)
		if !errors.Is(err, errDropped) {
			return nc, err
		}
		// Dropped before its result, as a listener flooded with strays
		// drops the oldest: dial again, within ctx (the transport's
		// handshake_timeout).
		select {
		case <-time.After(min(time.Duration(redials)*10*time.Millisecond, 200*time.Millisecond)):
		case <-ctx.Done():
			return nil, ctxErr(ctx, err)
		}
	}
}

// joinOnce dials one extra connection for the connection token names.
func (e *Engine) joinOnce(ctx context.Context, addr string, token [16]byte) (net.Conn, error) {
	d := net.Dialer{Control: e.dialControl}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := nc.Write(wire.AppendJoin(nil, &wire.Join{Token: token})); err != nil {
		nc.Close()
		return nil, dropped(ctx, err)
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		nc.Close()
		return nil, dropped(ctx, ctxErr(ctx, err))
	}
	if typ != wire.MsgResult {
		nc.Close()
		return nil, fmt.Errorf("%w: join answered with message type %d", ErrProtocol, typ)
	}
	if err := resultErr(addr, body); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

func resultErr(addr string, body []byte) error {
	r, err := wire.DecodeResult(body)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	var kind error
	switch r.Status {
	case wire.StatusOK:
		return nil
	case wire.StatusAuthFailed:
		kind = ErrAuth
	case wire.StatusVersion:
		kind = ErrVersion
	case wire.StatusNoTransport:
		kind = ErrNoTransport
	default:
		kind = ErrProtocol
	}
	// The peer's message may start with the kind's own words ("no usable
	// transport: ..."): say them once.
	msg := strings.TrimPrefix(r.Message, kind.Error()+": ")
	return fmt.Errorf("dial %s: refused by peer: %w: %s", addr, kind, msg)
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// gidAllowed checks the GID in a peer's handshake blob for transport name
// against security.rdma.allowed_gids: nil when there is no list, the
// transport has no GIDs, or the GID is on the list.
func (e *Engine) gidAllowed(name string, blob []byte) error {
	r := transportRowOf(name)
	if len(e.allowedGIDs) == 0 || r == nil || r.peerGIDs == nil {
		return nil
	}
	gids, err := r.peerGIDs(blob)
	if err != nil {
		return fmt.Errorf("%s: the peer's description: %w", name, err)
	}
	for _, gid := range gids {
		if !slices.Contains(e.allowedGIDs, gid) {
			return fmt.Errorf("%s: the peer's GID %s is not in security.rdma.allowed_gids", name, net.IP(gid[:]))
		}
	}
	return nil
}

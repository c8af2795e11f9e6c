package handshake

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Inbound is an inbound connection in its handshake: its place in the
// gate of pending connections (security.max_pending_handshakes), which it
// leaves once it has authenticated, and its deadline.
type Inbound struct {
	Conn     net.Conn
	ticket   *admit.Ticket
	deadline time.Time
	timeout  time.Duration
	secret   string
	th       [32]byte // the transcript, once challenged
}

// Accept starts the handshake of nc, which holds ticket, within timeout
// (handshake_timeout): the deadline of its reads and writes. secret, when
// set, is what the dialer must prove it knows.
func Accept(nc net.Conn, ticket *admit.Ticket, timeout time.Duration, secret string) *Inbound {
	in := &Inbound{Conn: nc, ticket: ticket, deadline: time.Now().Add(timeout), timeout: timeout, secret: secret}
	nc.SetDeadline(in.deadline)
	return in
}

// Deadline is when the handshake must end.
func (in *Inbound) Deadline() time.Time { return in.deadline }

// Admitted takes the connection out of the gate, its handshake's reads
// done: an eviction from here on cannot touch it, and one that came just
// before is undone (its reads succeeded: the peer is not dropped).
func (in *Inbound) Admitted() {
	in.ticket.Leave()
	in.Conn.SetDeadline(in.deadline)
}

// failed is err, a failure of the connection's handshake before it was
// admitted: an eviction, when the gate evicted it.
func (in *Inbound) failed(err error) error {
	if in.ticket.Evicted() {
		return &AuthError{auth.ReasonEvicted, fmt.Errorf("dropped in its handshake for a newer connection (security.max_pending_handshakes, max_pending_per_source): %w", err)}
	}
	return err
}

// First reads the connection's first message: a join, or a hello and its
// body. ctx is the engine's: once it ended, a failed read is no refusal.
func (in *Inbound) First(ctx context.Context) (*wire.Join, *wire.Hello, []byte, error) {
	if in.ticket.Evicted() { // an eviction's deadline, which Accept's replaced
		return nil, nil, nil, in.failed(errors.New("evicted before its hello"))
	}
	typ, body, err := wire.ReadMessage(in.Conn)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, nil, nil, err // Close
	case in.ticket.Evicted():
		return nil, nil, nil, in.failed(err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, nil, nil, &AuthError{auth.ReasonTimeout, fmt.Errorf("no hello within handshake_timeout %v", in.timeout)}
	case errors.Is(err, wire.ErrMalformed):
		return nil, nil, nil, &AuthError{auth.ReasonMalformed, err}
	default:
		// A connection closed without a word (a port check).
		return nil, nil, nil, &AuthError{auth.ReasonNoProof, fmt.Errorf("closed before its hello: %w", err)}
	}
	switch typ {
	case wire.MsgJoin:
		j, err := wire.DecodeJoin(body)
		if err != nil {
			return nil, nil, nil, &AuthError{auth.ReasonMalformed, err}
		}
		return j, nil, nil, nil
	case wire.MsgHello:
		h, err := wire.DecodeHello(body)
		if err != nil {
			return nil, nil, nil, &AuthError{auth.ReasonMalformed, err}
		}
		return nil, h, body, nil
	}
	return nil, nil, nil, &AuthError{auth.ReasonMalformed, fmt.Errorf("%w: first message is type %d, not hello or join", transport.ErrProtocol, typ)}
}

// AnswerJoin answers a join: a refusal when its token is unknown, else
// the result that lets it in, with the connection admitted and its
// deadline cleared.
func (in *Inbound) AnswerJoin(known bool) error {
	if !known {
		in.Conn.Write(wire.AppendResult(nil, &wire.Result{Status: wire.StatusBadRequest, Message: "join: unknown token"}))
		return &AuthError{auth.ReasonBadProof, errors.New("join with an unknown token")}
	}
	in.Admitted()
	if _, err := in.Conn.Write(wire.AppendResult(nil, &wire.Result{Status: wire.StatusOK})); err != nil {
		return err
	}
	in.Conn.SetDeadline(time.Time{})
	return nil
}

// Challenge answers hello h (whose body is helloBody) with a challenge of
// caps, in the highest version both sides speak, and with a secret reads
// the dialer's proof and checks it, admitting the connection once it
// does. A hello without a common version is refused. ctx is the engine's.
func (in *Inbound) Challenge(ctx context.Context, h *wire.Hello, helloBody []byte, caps uint64) (version uint16, err error) {
	nc := in.Conn
	if h.MaxVersion < wire.VersionMin || h.MinVersion > wire.VersionMax {
		return 0, Refuse(nc, wire.StatusVersion, "peer speaks protocol versions %d-%d, this engine %d-%d", h.MinVersion, h.MaxVersion, wire.VersionMin, wire.VersionMax)
	}
	version = min(h.MaxVersion, wire.VersionMax)
	// The challenge carries nothing but a fresh nonce and constants.
	ch := wire.Challenge{Version: version, Caps: caps, AuthRequired: in.secret != ""}
	if _, err := rand.Read(ch.Nonce[:]); err != nil {
		return 0, err
	}
	chMsg := wire.AppendChallenge(nil, &ch)
	if _, err := nc.Write(chMsg); err != nil {
		return 0, in.failed(err)
	}
	in.th = transcript(helloBody, chMsg[wire.HandshakeHeaderLen:])
	if in.secret == "" {
		return version, nil
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		if in.ticket.Evicted() && ctx.Err() == nil {
			return 0, in.failed(err)
		}
		reason := auth.ReasonNoProof
		if errors.Is(err, os.ErrDeadlineExceeded) {
			reason = auth.ReasonTimeout
		}
		return 0, &AuthError{reason, fmt.Errorf("auth: %w", err)}
	}
	if typ != wire.MsgAuth {
		Refuse(nc, wire.StatusAuthFailed, "this engine requires authentication: configure the shared secret")
		return 0, &AuthError{auth.ReasonNoProof, fmt.Errorf("auth: message type %d instead of a proof", typ)}
	}
	a, err := wire.DecodeAuth(body)
	if err != nil {
		return 0, &AuthError{auth.ReasonMalformed, err}
	}
	if want := proof(in.secret, labelDialer, in.th, nil); !auth.Equal(a.Proof[:], want[:]) {
		Refuse(nc, wire.StatusAuthFailed, "authentication failed: wrong secret")
		return 0, &AuthError{auth.ReasonBadProof, errors.New("authentication failed: wrong secret")}
	}
	in.Admitted()
	return version, nil
}

// Welcome sends w, with the acceptor's proof when there is a secret, and
// clears the connection's deadline: the transport's setup takes it over.
func (in *Inbound) Welcome(w *wire.Welcome) error {
	wm := wire.AppendWelcome(nil, w)
	if in.secret != "" {
		p := welcomeProof(in.secret, in.th, wm[wire.HandshakeHeaderLen:])
		copy(wm[wire.HandshakeHeaderLen+wire.WelcomeProofOffset:], p[:])
	}
	if _, err := in.Conn.Write(wm); err != nil {
		return err
	}
	in.Conn.SetDeadline(time.Time{})
	return nil
}

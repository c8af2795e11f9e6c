package handshake

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"

	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Dial runs the dialer's side of the handshake on nc, which reached addr:
// it sends hello (with a fresh nonce), answers the challenge with a proof
// of secret when the acceptor requires one, and returns the challenge and
// the welcome, whose proof it has checked. A refusal is the error its
// result says (ErrAuth, ErrVersion, ErrNoTransport or a protocol error); a
// connection the acceptor closed before the welcome matches ErrDropped.
// Errors name addr.
func Dial(ctx context.Context, nc net.Conn, addr string, hello *wire.Hello, secret string) (*wire.Challenge, *wire.Welcome, error) {
	if _, err := rand.Read(hello.Nonce[:]); err != nil {
		return nil, nil, err
	}
	helloMsg := wire.AppendHello(nil, hello)
	if _, err := nc.Write(helloMsg); err != nil {
		return nil, nil, fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, err))
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, CtxErr(ctx, err)))
	}
	if typ == wire.MsgResult {
		return nil, nil, resultErr(addr, body)
	}
	if typ != wire.MsgChallenge {
		return nil, nil, fmt.Errorf("dial %s: %w: expected challenge, got message type %d", addr, transport.ErrProtocol, typ)
	}
	ch, err := wire.DecodeChallenge(body)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if ch.Version < wire.VersionMin || ch.Version > wire.VersionMax {
		return nil, nil, fmt.Errorf("dial %s: %w: peer chose version %d", addr, ErrVersion, ch.Version)
	}
	th := transcript(helloMsg[wire.HandshakeHeaderLen:], body)
	switch {
	case ch.AuthRequired && secret == "":
		return nil, nil, fmt.Errorf("dial %s: %w: the peer requires a shared secret; set secret_file (or secret) in the config, or XFER_SECRET", addr, ErrAuth)
	case !ch.AuthRequired && secret != "":
		return nil, nil, fmt.Errorf("dial %s: %w: the peer has no shared secret, and this side requires one", addr, ErrAuth)
	case secret != "":
		a := wire.Auth{Proof: proof(secret, labelDialer, th, nil)}
		if _, err := nc.Write(wire.AppendAuth(nil, &a)); err != nil {
			return nil, nil, fmt.Errorf("dial %s: auth: %w", addr, dropped(ctx, err))
		}
	}
	typ, body, err = wire.ReadMessage(nc)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: handshake: %w", addr, dropped(ctx, CtxErr(ctx, err)))
	}
	if typ == wire.MsgResult {
		return nil, nil, resultErr(addr, body)
	}
	if typ != wire.MsgWelcome {
		return nil, nil, fmt.Errorf("dial %s: %w: expected welcome, got message type %d", addr, transport.ErrProtocol, typ)
	}
	if secret != "" {
		want := welcomeProof(secret, th, body)
		if len(body) < wire.WelcomeProofOffset+32 || !auth.Equal(body[wire.WelcomeProofOffset:wire.WelcomeProofOffset+32], want[:]) {
			return nil, nil, fmt.Errorf("dial %s: %w: the peer could not prove it knows this side's shared secret (different secrets)", addr, ErrAuth)
		}
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return ch, w, nil
}

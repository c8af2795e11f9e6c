package kv

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/auth"
)

// With a secret (the data-plane engine's Config.Secret, the same on both
// sides), every gRPC call is authenticated both ways, and no secret crosses
// the wire. xfer's clients authenticate each connection once, when gRPC
// opens it (connauth.go), and their calls then cost nothing more. A call
// on a connection that did not (a plain gRPC client, or an xfer client from
// before connection authentication) must carry a proof of its own, which
// this file checks:
//
//   - the client sends, in the call's metadata (mdCallProof), a timestamp,
//     a nonce (its random client ID and the call's number, counted from 1)
//     and HMAC-SHA256(secret, callLabel | method | timestamp | nonce);
//   - the server checks the proof, in constant time, that the timestamp is
//     within callWindow of its clock, and that the client's call number
//     was not seen before (a window of the latest replayWindow numbers
//     per client ID, kept while the client calls: a captured call cannot
//     be replayed), before it reads or changes anything; a call without
//     it gets codes.Unauthenticated;
//   - the server answers with HMAC-SHA256(secret, replyLabel | method |
//     timestamp | nonce) in the response's trailer (mdReplyProof), which
//     such a client checks before it believes a successful response.
//
// A proof authenticates the call or the connection, not the bytes that
// follow: a man in the middle that can change the bytes of a connection is
// kept out by TLS (ServerOptions.TLS, ClientOptions.TLS), not by this. The
// data-plane requests (Get, Put and Delete as messages on the engine's
// connection) travel on a connection the engine's handshake authenticated
// with the same secret, both ways.
const (
	mdCallProof  = "xfer-kv-proof"
	mdReplyProof = "xfer-kv-server-proof"
	callLabel    = "xfer-kv-v1 call"
	replyLabel   = "xfer-kv-v1 reply"
	// callWindow is how far a call's timestamp may be from the server's
	// clock.
	callWindow = 2 * time.Minute
	// callProofLen is a call proof's size before encoding: timestamp (8),
	// nonce (16: client ID, call number), HMAC (32).
	callProofLen = 8 + 16 + 32
	// replyProofB64 is the server's proof's size encoded: an HMAC in
	// unpadded base64.
	replyProofB64 = (auth.Size*8 + 5) / 6
	// replayWindow is how many of a client's latest call numbers the
	// server remembers: an older number is refused. Calls in flight at
	// once from one client are fewer.
	replayWindow = auth.WindowSize
	// maxClients bounds the clients remembered: past it, new clients are
	// refused until old ones expire (only holders of the secret make
	// clients).
	maxClients = 1 << 16
)

// mac appends HMAC-SHA256(secret, label | method | 0 | ts | nonce) to dst.
func (k *callKeys) mac(dst []byte, label, method string, ts, nonce []byte) []byte {
	return k.Sum(dst, label, []byte(method), []byte{0}, ts, nonce)
}

// equalMAC reports, in constant time, whether the proof got is the MAC of
// label, method, ts and nonce.
func (k *callKeys) equalMAC(got []byte, label, method string, ts, nonce []byte) bool {
	return k.Verify(got, label, []byte(method), []byte{0}, ts, nonce)
}

// callAuth is the server's side: the secret and the nonces seen lately.
type callAuth struct {
	keys *callKeys    // nil without a secret
	e    *xfer.Engine // counts and logs refusals (AuthFailed)

	seen auth.Senders // the call numbers of each client seen lately
}

// newCallAuth returns the server's side for the engine e; it checks nothing
// when e has no secret.
func newCallAuth(e *xfer.Engine) *callAuth {
	a := &callAuth{e: e, seen: auth.Senders{Span: callWindow, Max: maxClients}}
	if secret := e.Config().Secret; secret != "" {
		a.keys = newCallKeys(secret)
	}
	return a
}

// tapped marks a call whose proof the server's tap (Server.Serve's
// grpc.InTapHandle) checked; its value is the proof.
type tapped struct{}

// tap checks a call's proof from its headers, before gRPC reads the
// request: a call without one is refused before its bytes are decoded.
func (a *callAuth) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if a == nil || a.keys == nil || connAuthenticated(ctx) {
		return ctx, nil
	}
	raw, err := a.verifyOrRefuse(ctx, info.Header, info.FullMethodName)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, tapped{}, raw), nil
}

// check authenticates the call in ctx, in the handler, before it reads or
// changes anything: nil when the server has no secret, else a
// codes.Unauthenticated error for a call without a valid proof. On success
// it sets the server's proof on the response. A call the tap checked is
// not checked again (its nonce is spent).
func (a *callAuth) check(ctx context.Context) error {
	if a == nil || a.keys == nil || connAuthenticated(ctx) {
		return nil
	}
	method, _ := grpc.Method(ctx)
	raw, ok := ctx.Value(tapped{}).([]byte)
	if !ok {
		md, _ := metadata.FromIncomingContext(ctx)
		var err error
		if raw, err = a.verifyOrRefuse(ctx, md, method); err != nil {
			return err
		}
	}
	var mac [auth.Size]byte
	// In the trailer only: every response has one, success or failure,
	// and a second copy in the header would cost every call its encoding
	// and decoding again (a value that differs every call gains nothing
	// from HPACK's table).
	grpc.SetTrailer(ctx, metadata.Pairs(mdReplyProof, a.replyProof(mac[:0], method, raw)))
	return nil
}

// replyProof is the server's proof for the call whose proof is raw,
// encoded; scratch is room for the MAC.
func (a *callAuth) replyProof(scratch []byte, method string, raw []byte) string {
	return base64.RawStdEncoding.EncodeToString(a.keys.mac(scratch, replyLabel, method, raw[:8], raw[8:24]))
}

// verifyOrRefuse verifies a call's proof, and counts and logs a refusal.
func (a *callAuth) verifyOrRefuse(ctx context.Context, md metadata.MD, method string) ([]byte, error) {
	raw, reason, err := a.verify(md, method)
	if err != nil {
		src := "unknown"
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			src = p.Addr.String()
		}
		a.e.AuthFailed(xfer.PlaneKV, reason, src, err)
		return nil, status.Error(codes.Unauthenticated, "kv: "+err.Error())
	}
	return raw, nil
}

func (a *callAuth) verify(md metadata.MD, method string) ([]byte, string, error) {
	vals := md.Get(mdCallProof)
	if len(vals) != 1 {
		return nil, xfer.ReasonNoProof, errors.New("this server requires authentication: configure the shared secret (secret_file)")
	}
	raw, err := base64.RawStdEncoding.DecodeString(vals[0])
	if err != nil || len(raw) != callProofLen {
		return nil, xfer.ReasonMalformed, errors.New("malformed authentication proof")
	}
	ts, nonce := raw[:8], raw[8:24]
	if !a.keys.equalMAC(raw[24:], callLabel, method, ts, nonce) {
		return nil, xfer.ReasonBadProof, errors.New("authentication failed: wrong secret")
	}
	t := int64(binary.LittleEndian.Uint64(ts))
	now := time.Now()
	if d := time.Duration(now.UnixNano() - t); d > callWindow || d < -callWindow {
		return nil, xfer.ReasonTimeout, errors.New("authentication failed: the call's timestamp is off by more than 2m (check the clocks)")
	}
	switch err := a.seen.Accept(binary.LittleEndian.Uint64(nonce[:8]), binary.LittleEndian.Uint64(nonce[8:]), now); {
	case errors.Is(err, auth.ErrTooManySenders):
		return nil, xfer.ReasonTimeout, err
	case err != nil:
		return nil, xfer.ReasonBadProof, err
	}
	return raw, "", nil
}

package kv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/auth"
)

// Connection authentication: with a secret, a client authenticates each
// gRPC connection once, when gRPC opens it, and the server proves itself
// in return; the calls on that connection then carry nothing and cost
// nothing more. It is a gRPC transport credential (connCreds) that runs
// this exchange on the connection before HTTP/2 starts, over TLS when TLS
// is configured:
//
//	client → server  connMagic, flags, nonce_c (32 random bytes)
//	server → client  connMagic, flags, nonce_s (32 random bytes)
//	client → server  proof_c = HMAC-SHA256(secret, connClientLabel | nonce_c | nonce_s | binding)
//	server → client  connAccepted, proof_s = HMAC-SHA256(secret, connServerLabel | nonce_c | nonce_s | binding)
//	                 (or connRefused, and the server closes the connection)
//
// flags says whether the sender has a secret. The client proves first: the
// server sends nothing derived from the secret before the client's proof
// checks, so scanning a server yields nothing to guess against. The
// server's fresh nonce makes every connection's proofs new (a captured
// exchange cannot be replayed), and the two labels keep one side's proof
// from being reflected as the other's. binding is TLS's exported keying
// material when the connection is TLS (RFC 5705), so the proofs are bound
// to that TLS session and cannot be relayed into another; without TLS it is
// empty, and, as on the engine's own connections, an attacker who can take
// over a TCP connection after it authenticated is kept out only by TLS.
//
// A connection that does not start with connMagic (a plain gRPC client, or
// an xfer client from before connection authentication) is served as
// unauthenticated: its calls must each carry a proof (callAuth), and a
// call without one gets codes.Unauthenticated.
const (
	connMagic       = "XKV1"
	connClientLabel = "xfer-kv-conn-v1 client"
	connServerLabel = "xfer-kv-conn-v1 server"
	connNonceLen    = 32
	connHelloLen    = len(connMagic) + 1 + connNonceLen
	connAccepted    = 1
	connRefused     = 0
	connHasSecret   = 1
	// connAuthTimeout bounds the exchange on a client whose dial context
	// has no deadline.
	connAuthTimeout = 10 * time.Second
	// tlsBindingLabel is the label of the TLS keying material the proofs
	// are bound to.
	tlsBindingLabel = "EXPORTER-xfer-kv-conn-v1"
)

// authRefusedText starts every error of a connection refused by
// authentication; gRPC reports a handshake's error only as text inside an
// Unavailable status, and Client.convert finds it there.
const authRefusedText = "xfer kv authentication: "

// connCreds wraps gRPC's transport credentials (insecure, or TLS) with the
// exchange above. With a nil keys, a server answers that it has no secret;
// a client always has one (a client without a secret uses the inner
// credentials alone).
type connCreds struct {
	inner credentials.TransportCredentials
	keys  *callKeys
	e     *xfer.Engine // a server's: counts and logs refusals; nil on a client
}

// connAuthInfo is the AuthInfo of a connection through connCreds: the inner
// credentials' (TLS's, when TLS is on), and whether the exchange
// authenticated the connection.
type connAuthInfo struct {
	credentials.AuthInfo
	authenticated bool
}

func (a connAuthInfo) AuthType() string {
	if a.AuthInfo == nil {
		return "xfer-kv"
	}
	return "xfer-kv+" + a.AuthInfo.AuthType()
}

// GetCommonAuthInfo reports the inner credentials' security level (gRPC
// checks it for per-call credentials that require transport security).
func (a connAuthInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	if c, ok := a.AuthInfo.(interface {
		GetCommonAuthInfo() credentials.CommonAuthInfo
	}); ok {
		return c.GetCommonAuthInfo()
	}
	return credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}
}

// connAuthenticated reports whether the call in ctx came on a connection
// that authenticated with the secret.
func connAuthenticated(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ai, ok := p.AuthInfo.(connAuthInfo)
	return ok && ai.authenticated
}

func (c *connCreds) Info() credentials.ProtocolInfo { return c.inner.Info() }

func (c *connCreds) Clone() credentials.TransportCredentials {
	return &connCreds{inner: c.inner.Clone(), keys: c.keys, e: c.e}
}

//nolint:staticcheck // part of the interface; gRPC deprecated it.
func (c *connCreds) OverrideServerName(name string) error { return c.inner.OverrideServerName(name) }

// binding is the TLS keying material the proofs are bound to, or nothing
// without TLS.
func binding(ai credentials.AuthInfo) ([]byte, error) {
	t, ok := ai.(credentials.TLSInfo)
	if !ok {
		return nil, nil
	}
	return t.State.ExportKeyingMaterial(tlsBindingLabel, nil, 32)
}

// ClientHandshake runs the exchange as the client, after the inner
// credentials' handshake.
func (c *connCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.inner.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(connAuthTimeout)
	}
	conn.SetDeadline(deadline)
	if err := c.clientExchange(conn, ai); err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, connAuthInfo{AuthInfo: ai, authenticated: true}, nil
}

func (c *connCreds) clientExchange(conn net.Conn, ai credentials.AuthInfo) error {
	bind, err := binding(ai)
	if err != nil {
		return fmt.Errorf("%sTLS keying material: %w", authRefusedText, err)
	}
	var hello [connHelloLen]byte
	copy(hello[:], connMagic)
	hello[len(connMagic)] = connHasSecret
	nonceC := hello[len(connMagic)+1:]
	rand.Read(nonceC)
	if _, err := conn.Write(hello[:]); err != nil {
		return err
	}
	var reply [connHelloLen]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%sthe server closed the connection: it is not an xfer KV server, or one older than connection authentication", authRefusedText)
		}
		return err
	}
	if string(reply[:len(connMagic)]) != connMagic {
		return fmt.Errorf("%sthe server answered something else: it is not an xfer KV server", authRefusedText)
	}
	if reply[len(connMagic)]&connHasSecret == 0 {
		return fmt.Errorf("%sthe server has no shared secret, and this client has one: configure the same secret_file on both", authRefusedText)
	}
	nonceS := reply[len(connMagic)+1:]
	proof := c.keys.connMAC(nil, connClientLabel, nonceC, nonceS, bind)
	if _, err := conn.Write(proof); err != nil {
		return err
	}
	var verdict [1 + auth.Size]byte
	if _, err := io.ReadFull(conn, verdict[:1]); err != nil {
		return err
	}
	if verdict[0] != connAccepted {
		return fmt.Errorf("%sthe server refused this client's proof: the two have different secrets", authRefusedText)
	}
	if _, err := io.ReadFull(conn, verdict[1:]); err != nil {
		return err
	}
	if !c.keys.Verify(verdict[1:], connServerLabel, nonceC, nonceS, bind) {
		return fmt.Errorf("%sthe server could not prove it knows the shared secret", authRefusedText)
	}
	return nil
}

// ServerHandshake runs the exchange as the server, after the inner
// credentials' handshake. A connection that does not start with connMagic
// is served unauthenticated (its calls need their own proofs).
func (c *connCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, ai, err := c.inner.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	// The exchange is bounded by the deadline gRPC set for the whole
	// connection setup (grpc.ConnectionTimeout: Serve's is at most
	// handshakeTimeout), which gRPC clears once the connection is up.
	var hello [connHelloLen]byte
	if _, err := io.ReadFull(conn, hello[:len(connMagic)]); err != nil {
		conn.Close()
		return nil, nil, err
	}
	if string(hello[:len(connMagic)]) != connMagic {
		pc := &prefixConn{Conn: conn}
		pc.prefix = append(pc.prefix, hello[:len(connMagic)]...)
		return pc, connAuthInfo{AuthInfo: ai}, nil
	}
	ok, reason, err := c.serverExchange(conn, ai, &hello)
	if err != nil {
		if c.e != nil && reason != "" {
			c.e.AuthFailed(xfer.PlaneKV, reason, conn.RemoteAddr().String(), err)
		}
		conn.Close()
		return nil, nil, err
	}
	return conn, connAuthInfo{AuthInfo: ai, authenticated: ok}, nil
}

// serverExchange is the rest of the server's side: whether the connection
// authenticated, or the refusal's reason (for xfer_auth_failures_total) and
// error.
func (c *connCreds) serverExchange(conn net.Conn, ai credentials.AuthInfo, hello *[connHelloLen]byte) (bool, string, error) {
	if _, err := io.ReadFull(conn, hello[len(connMagic):]); err != nil {
		return false, xfer.ReasonMalformed, fmt.Errorf("%sa short hello: %w", authRefusedText, err)
	}
	var reply [connHelloLen]byte
	copy(reply[:], connMagic)
	if c.keys == nil {
		// No secret here: say so, and serve the connection as any.
		_, err := conn.Write(reply[:])
		return false, "", err
	}
	reply[len(connMagic)] = connHasSecret
	nonceS := reply[len(connMagic)+1:]
	rand.Read(nonceS)
	if _, err := conn.Write(reply[:]); err != nil {
		return false, "", err
	}
	var proof [auth.Size]byte
	if _, err := io.ReadFull(conn, proof[:]); err != nil {
		reason := xfer.ReasonNoProof
		if errors.Is(err, io.ErrUnexpectedEOF) {
			reason = xfer.ReasonMalformed
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			reason = xfer.ReasonTimeout
		}
		return false, reason, fmt.Errorf("%sno proof from the client: %w", authRefusedText, err)
	}
	bind, err := binding(ai)
	if err != nil {
		return false, "", fmt.Errorf("%sTLS keying material: %w", authRefusedText, err)
	}
	nonceC := hello[len(connMagic)+1:]
	if !c.keys.Verify(proof[:], connClientLabel, nonceC, nonceS, bind) {
		conn.Write([]byte{connRefused})
		return false, xfer.ReasonBadProof, fmt.Errorf("%sauthentication failed: wrong secret", authRefusedText)
	}
	verdict := append(make([]byte, 0, 1+auth.Size), connAccepted)
	verdict = c.keys.connMAC(verdict, connServerLabel, nonceC, nonceS, bind)
	if _, err := conn.Write(verdict); err != nil {
		return false, "", err
	}
	return true, "", nil
}

// callKeys is the secret keyed once (auth.Key), and the layouts of the
// MACs of calls (auth.go) and connections (connMAC). Safe for concurrent
// use.
type callKeys struct{ *auth.Key }

func newCallKeys(secret string) *callKeys { return &callKeys{auth.NewKey([]byte(secret))} }

// connMAC appends HMAC-SHA256(secret, label | nonceC | nonceS | bind) to dst.
func (k *callKeys) connMAC(dst []byte, label string, nonceC, nonceS, bind []byte) []byte {
	return k.Sum(dst, label, nonceC, nonceS, bind)
}

// prefixConn gives back the bytes the server read to tell a connection
// without the exchange, then reads the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// authRefused reports whether a gRPC Unavailable status's message is a
// connection that authentication refused, and returns the reason.
func authRefused(msg string) (string, bool) {
	i := strings.Index(msg, authRefusedText)
	if i < 0 {
		return "", false
	}
	reason := msg[i+len(authRefusedText):]
	// gRPC quotes the handshake's error inside its own text.
	if j := strings.IndexAny(reason, `"\`); j >= 0 {
		reason = reason[:j]
	}
	return reason, true
}

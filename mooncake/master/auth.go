package master

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer/internal/auth"
)

// With a shared secret (XFER_SECRET or XFER_SECRET_FILE, the same on the
// master and its clients), every call to the master is authenticated both
// ways, as kv's calls are, and no secret crosses the wire:
//
//   - the client sends, in the call's metadata (mdProof), a timestamp, a
//     nonce (its random ID and the call's number, counted from 1) and
//     HMAC-SHA256(secret, callLabel | method | 0 | timestamp | nonce);
//   - the master checks the proof in constant time, that the timestamp is
//     within callWindow of its clock and that the call's number is new for
//     its client ID (auth.Window), before it reads or changes anything; a
//     call without a valid proof gets codes.Unauthenticated;
//   - the master answers with HMAC-SHA256(secret, replyLabel | method | 0
//     | timestamp | nonce) in the response's trailer (mdReplyProof), which
//     the client checks before it believes the response.
//
// The proofs authenticate calls, not their bytes: a man in the middle who
// can change bytes is kept out by TLS, not by this.
const (
	mdProof      = "xfer-mooncake-master-proof"
	mdReplyProof = "xfer-mooncake-master-server-proof"
	callLabel    = "xfer-mooncake-master-v1 call"
	replyLabel   = "xfer-mooncake-master-v1 reply"
	// callWindow is how far a call's timestamp may be from the master's
	// clock.
	callWindow = 2 * time.Minute
	// proofLen is a call proof's size before encoding: timestamp (8),
	// nonce (16: client ID, call number), HMAC (32).
	proofLen = 8 + 16 + auth.Size
	// maxProofClients bounds the client IDs remembered in the replay
	// windows: past it, new ones are refused until old ones expire (only
	// holders of the secret make them).
	maxProofClients = 1 << 16
	// MinSecretLen is the shortest secret accepted, as every plane's.
	MinSecretLen = auth.MinSecretLen
)

// SecretFrom returns the shared secret that XFER_SECRET or the file
// XFER_SECRET_FILE names (trimmed of surrounding white space), as the
// engine reads them, with the variables read through getenv (a command's
// os.Getenv; the C library's getenv, in a process whose environment changes
// after Go started); "" when neither is set. The error never shows the
// secret.
func SecretFrom(getenv func(string) string) (string, error) {
	secret := getenv("XFER_SECRET")
	if f := getenv("XFER_SECRET_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("XFER_SECRET_FILE: %w", err)
		}
		s := strings.TrimSpace(string(b))
		switch {
		case s == "":
			return "", fmt.Errorf("XFER_SECRET_FILE %s is empty: generate a secret with `xfer secret > %s`", f, f)
		case secret != "" && secret != s:
			return "", fmt.Errorf("XFER_SECRET and XFER_SECRET_FILE %s both set, and differ: use one of them", f)
		}
		secret = s
	}
	if secret != "" && len(secret) < MinSecretLen {
		return "", fmt.Errorf("shared secret: %d bytes, at least %d required: generate one with `xfer secret > FILE` and set XFER_SECRET_FILE=FILE", len(secret), MinSecretLen)
	}
	return secret, nil
}

// callMAC appends the MAC of label, method, ts and nonce to dst.
func callMAC(k *auth.Key, dst []byte, label, method string, ts, nonce []byte) []byte {
	return k.Sum(dst, label, []byte(method), []byte{0}, ts, nonce)
}

// serverAuth is the master's side: the key and the call numbers seen.
type serverAuth struct {
	key *auth.Key
	s   *Service // counts and logs refusals; nil: neither

	seen auth.Senders // the call numbers of each client seen lately
}

// UnaryServerInterceptor returns the interceptor that refuses, with
// codes.Unauthenticated, every call that does not prove secret; with an
// empty secret it lets every call through. Refusals are counted in s's
// Stats (AuthFailures) and logged at debug level, when s is not nil.
func UnaryServerInterceptor(secret string, s *Service) grpc.UnaryServerInterceptor {
	if secret == "" {
		return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}
	}
	a := &serverAuth{key: auth.NewKey([]byte(secret)), seen: auth.Senders{Span: callWindow, Max: maxProofClients}, s: s}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		raw, err := a.verify(md, info.FullMethod, time.Now())
		if err != nil {
			src := "unknown"
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				src = p.Addr.String()
			}
			if a.s != nil {
				a.s.authFailures.Add(1)
				a.s.o.Logger.Debug("mooncake master: refused a call", "method", info.FullMethod, "remote", src, "err", err)
			}
			return nil, status.Error(codes.Unauthenticated, "mooncake master: "+err.Error())
		}
		var mac [auth.Size]byte
		grpc.SetTrailer(ctx, metadata.Pairs(mdReplyProof,
			base64.RawStdEncoding.EncodeToString(callMAC(a.key, mac[:0], replyLabel, info.FullMethod, raw[:8], raw[8:24]))))
		return h(ctx, req)
	}
}

// verify checks a call's proof and returns it decoded.
func (a *serverAuth) verify(md metadata.MD, method string, now time.Time) ([]byte, error) {
	vals := md.Get(mdProof)
	if len(vals) != 1 {
		return nil, errors.New("this master requires authentication: set the shared secret (XFER_SECRET_FILE)")
	}
	raw, err := base64.RawStdEncoding.DecodeString(vals[0])
	if err != nil || len(raw) != proofLen {
		return nil, errors.New("malformed authentication proof")
	}
	ts, nonce := raw[:8], raw[8:24]
	if !a.key.Verify(raw[24:], callLabel, []byte(method), []byte{0}, ts, nonce) {
		return nil, errors.New("authentication failed: wrong secret")
	}
	if d := time.Duration(now.UnixNano() - int64(binary.LittleEndian.Uint64(ts))); d > callWindow || d < -callWindow {
		return nil, errors.New("authentication failed: the call's timestamp is off by more than 2m (check the clocks)")
	}
	if err := a.seen.Accept(binary.LittleEndian.Uint64(nonce[:8]), binary.LittleEndian.Uint64(nonce[8:]), now); err != nil {
		return nil, err
	}
	return raw, nil
}

// UnaryClientInterceptor returns the interceptor that proves secret on
// every call and checks the master's proof in its answer: a successful
// answer without it is an error (codes.Unauthenticated). With an empty
// secret it adds nothing.
func UnaryClientInterceptor(secret string) grpc.UnaryClientInterceptor {
	if secret == "" {
		return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(ctx, method, req, reply, cc, opts...)
		}
	}
	key := auth.NewKey([]byte(secret))
	var idb [8]byte
	rand.Read(idb[:])
	var calls atomic.Uint64
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		raw := make([]byte, 24, proofLen)
		binary.LittleEndian.PutUint64(raw[:8], uint64(time.Now().UnixNano()))
		copy(raw[8:16], idb[:])
		binary.LittleEndian.PutUint64(raw[16:24], calls.Add(1))
		raw = callMAC(key, raw, callLabel, method, raw[:8], raw[8:24])
		ctx = metadata.AppendToOutgoingContext(ctx, mdProof, base64.RawStdEncoding.EncodeToString(raw))
		var trailer metadata.MD
		if err := invoke(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...); err != nil {
			return err
		}
		vals := trailer.Get(mdReplyProof)
		var got []byte
		if len(vals) == 1 {
			got, _ = base64.RawStdEncoding.DecodeString(vals[0])
		}
		if !key.Verify(got, replyLabel, []byte(method), []byte{0}, raw[:8], raw[8:24]) {
			return status.Error(codes.Unauthenticated, "mooncake master: the master did not prove the shared secret (is it the master, with the same XFER_SECRET?)")
		}
		return nil
	}
}

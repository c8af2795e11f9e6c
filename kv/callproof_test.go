package kv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The client side of per-call proofs, as xfer's clients sent them before
// they authenticated connections: the tests play such a client, which
// servers still accept.

// proveCalls returns the client's interceptor: it signs each call and
// checks the server's proof on its response.
func proveCalls(secret string) grpc.UnaryClientInterceptor {
	keys := newCallKeys(secret)
	var id [8]byte
	rand.Read(id[:])
	var calls atomic.Uint64
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var raw [callProofLen]byte
		binary.LittleEndian.PutUint64(raw[:8], uint64(time.Now().UnixNano()))
		copy(raw[8:16], id[:])
		binary.LittleEndian.PutUint64(raw[16:24], calls.Add(1))
		keys.mac(raw[:24], callLabel, method, raw[:8], raw[8:24])
		ctx = metadata.AppendToOutgoingContext(ctx, mdCallProof, base64.RawStdEncoding.EncodeToString(raw[:]))
		// The server's proof comes in the trailer (older servers sent it
		// in the header too).
		var trl metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trl))...)
		if got := trl.Get(mdReplyProof); len(got) == 1 && len(got[0]) == replyProofB64 {
			var mac [sha256.Size]byte
			n, derr := base64.RawStdEncoding.Decode(mac[:], []byte(got[0]))
			if derr == nil && n == len(mac) && keys.equalMAC(mac[:], replyLabel, method, raw[:8], raw[8:24]) {
				return err
			}
		}
		if err != nil {
			// A failure is a failure whoever sent it (gRPC's own errors,
			// such as a request it could not decode, come before the
			// handler and carry no proof); only a success must be proven.
			return err
		}
		return status.Error(codes.Unauthenticated, "kv: the server could not prove it knows the shared secret (it has none, or another)")
	}
}

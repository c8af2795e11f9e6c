package kv

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/kv/kvpb"
)

const testSecret = "the-kv-secret-of-this-test"

// rawConn is a gRPC connection with no secret: what an attacker who can
// reach the port has.
func rawConn(t testing.TB, addr string, opts ...grpc.DialOption) kvpb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return kvpb.NewKVClient(cc)
}

// calls makes every call of the service once, each of which would read or
// change something: Hello, Stats, Get of k, Put of k and of a new key,
// Delete of k.
func calls(ctx context.Context, c kvpb.KVClient) map[string]error {
	out := map[string]error{}
	_, out["hello"] = c.Hello(ctx, &kvpb.HelloRequest{Protocol: Protocol})
	_, out["stats"] = c.Stats(ctx, &kvpb.StatsRequest{})
	_, out["get"] = c.Get(ctx, &kvpb.GetRequest{Key: []byte("k"), InlineMax: 1 << 10})
	_, out["put"] = c.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("forged")}})
	_, out["put new"] = c.Put(ctx, &kvpb.PutRequest{Key: []byte("new"), Source: &kvpb.PutRequest_Value{Value: []byte("forged")}})
	_, out["delete"] = c.Delete(ctx, &kvpb.DeleteRequest{Key: []byte("k")})
	return out
}

// TestGRPCNeedsTheSecret: against a server with a secret, a raw gRPC client
// without it, with a wrong one, or replaying a captured call's proof gets
// Unauthenticated from every call, and nothing is read or changed; the
// refusals are counted. A client with the secret works, and refuses a
// server without it.
func TestGRPCNeedsTheSecret(t *testing.T) {
	ctx := ctxT(t)
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Secret: testSecret}})
	good := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}})
	if err := good.Put(ctx, "k", []byte("value")); err != nil {
		t.Fatal(err)
	}
	before := s.Snapshot()

	var captured metadata.MD
	capture := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		captured, _ = metadata.FromOutgoingContext(ctx)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	replay := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.NewOutgoingContext(ctx, captured), method, req, reply, cc, opts...)
	})
	// One authenticated Stats call whose proof the replay reuses.
	if _, err := rawConn(t, s.addr, capture, grpc.WithChainUnaryInterceptor(proveCalls(testSecret))).Stats(ctx, &kvpb.StatsRequest{}); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]kvpb.KVClient{
		"no secret":    rawConn(t, s.addr),
		"wrong secret": rawConn(t, s.addr, grpc.WithChainUnaryInterceptor(proveCalls("another-secret-of-enough-length"))),
		"replay":       rawConn(t, s.addr, replay),
	} {
		for call, err := range calls(ctx, c) {
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %s: %v, want Unauthenticated", name, call, err)
			}
		}
	}
	after := s.Snapshot()
	if after.Keys != before.Keys || after.ValueBytes != before.ValueBytes || after.Deletes != before.Deletes || after.Puts != before.Puts || after.Gets != before.Gets {
		t.Errorf("unauthenticated calls changed the server: %+v, then %+v", before, after)
	}
	if v, err := good.Get(ctx, "k"); err != nil || !bytes.Equal(v, []byte("value")) {
		t.Fatalf("get after the attack: %q %v", v, err)
	}
	if _, err := good.Get(ctx, "new"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a key put without the secret: %v", err)
	}
	n := 0
	for _, f := range s.Engine().Status().AuthFailures {
		if f.Plane == xfer.PlaneKV {
			n += int(f.Count)
		}
	}
	if n < 18 {
		t.Errorf("%d kv refusals counted, want 18: %+v", n, s.Engine().Status().AuthFailures)
	}

	// A client with the secret refuses a server that cannot prove it.
	open := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP}})
	if _, err := rawConn(t, open.addr, grpc.WithChainUnaryInterceptor(proveCalls(testSecret))).Stats(ctx, &kvpb.StatsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("client with a secret against a server without: %v, want Unauthenticated", err)
	}
}

// FuzzGRPCServer drives a real KV gRPC server that has a secret with
// arbitrary request bytes on each method, without a proof, with a garbage
// one, or with a valid one: an unauthenticated call always gets
// Unauthenticated and changes nothing; no call crashes the server.
func FuzzGRPCServer(f *testing.F) {
	s := startServer(f, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}, MaxValue: 1 << 16})
	s.peerWait = 10 * time.Millisecond
	authed := rawConn(f, s.addr, grpc.WithChainUnaryInterceptor(proveCalls(testSecret)))
	ctx := context.Background()
	if _, err := authed.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("value")}}); err != nil {
		f.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	defer cc.Close()
	signed, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(proveCalls(testSecret)))
	if err != nil {
		f.Fatal(err)
	}
	defer signed.Close()
	methods := []string{"Hello", "Get", "Put", "Delete", "Stats"}
	for _, m := range []proto.Message{
		&kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("forged")}},
		&kvpb.DeleteRequest{Key: []byte("k")},
		&kvpb.GetRequest{Key: []byte("k"), InlineMax: 100},
		&kvpb.HelloRequest{Protocol: Protocol},
	} {
		b, _ := proto.Marshal(m)
		for i := range byte(len(methods)) {
			f.Add(i, byte(0), "", b)
			f.Add(i, byte(1), "AAAA", b)
			f.Add(i, byte(2), "", b)
		}
	}
	f.Fuzz(func(t *testing.T, method, mode byte, proof string, data []byte) {
		body := rawMsg(data)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		name := "/" + kvpb.KV_ServiceDesc.ServiceName + "/" + methods[int(method)%len(methods)]
		var out rawMsg
		switch mode % 3 {
		case 0, 1:
			cctx := ctx
			if mode%3 == 1 {
				for _, c := range []byte(proof) {
					if c < 0x20 || c > 0x7e {
						return // gRPC's client refuses to send it
					}
				}
				cctx = metadata.AppendToOutgoingContext(ctx, mdCallProof, proof)
			}
			err := cc.Invoke(cctx, name, body, &out, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s without a valid proof: %v, want Unauthenticated", name, err)
			}
			v, err := authed.Get(ctx, &kvpb.GetRequest{Key: []byte("k"), InlineMax: 100})
			if err != nil || !bytes.Equal(v.GetValue(), []byte("value")) {
				t.Fatalf("after an unauthenticated %s: %v %v", name, v, err)
			}
		case 2:
			err := signed.Invoke(ctx, name, body, &out, grpc.ForceCodecV2(rawCodec{}))
			if status.Code(err) == codes.Unauthenticated {
				t.Fatalf("%s with a valid proof: %v", name, err)
			}
			// Put the value back for the next input.
			if _, err := authed.Put(ctx, &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("value")}}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSeenCalls: a client's call numbers are each accepted once, out of
// order within the window, and refused when older than it.
func TestSeenCalls(t *testing.T) {
	var w auth.Window
	for _, n := range []uint64{1, 3, 2, 5000, 4999, 4000} {
		if !w.Accept(n) {
			t.Fatalf("call %d refused", n)
		}
	}
	for _, n := range []uint64{1, 2, 3, 5000, 4999, 4000, 3976} {
		if w.Accept(n) {
			t.Fatalf("call %d accepted again (or too old)", n)
		}
	}
	if !w.Accept(5000 + replayWindow) {
		t.Fatal("a call a whole window ahead refused")
	}
	if w.Accept(5000) {
		t.Fatal("a call a window behind accepted")
	}
}

// BenchmarkCallProof measures what a secret costs one gRPC call in the
// authentication code alone, both sides, without gRPC's transport: the
// client's proof, the server's check of it (with the replay window) and
// its own proof, and the client's check of that.
func BenchmarkCallProof(b *testing.B) {
	e, err := xfer.Open(context.Background(), xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Secret: testSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	a := newCallAuth(e)
	const method = "/xfer.kv.v1.KV/Get"
	server := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		raw, _, err := a.verify(md, method)
		if err != nil {
			return err
		}
		var mac [32]byte
		proof := metadata.Pairs(mdReplyProof, a.replyProof(mac[:0], method, raw))
		for _, o := range opts {
			if t, ok := o.(grpc.TrailerCallOption); ok {
				*t.TrailerAddr = proof
			}
		}
		return nil
	}
	client := proveCalls(testSecret)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := client(ctx, method, nil, nil, nil, server); err != nil {
			b.Fatal(err)
		}
	}
}

// TestClientRefusesBadReplyProof: a success whose trailer carries no proof,
// a wrong one, one of the wrong size or two is refused as Unauthenticated
// (none crashes the client); a failure stays the failure it is.
func TestClientRefusesBadReplyProof(t *testing.T) {
	client := proveCalls(testSecret)
	for name, vals := range map[string][]string{
		"none":      nil,
		"wrong":     {strings.Repeat("A", replyProofB64)},
		"too long":  {strings.Repeat("A", 4*replyProofB64)},
		"too short": {"AAAA"},
		"not b64":   {strings.Repeat("!", replyProofB64)},
		"two":       {strings.Repeat("A", replyProofB64), strings.Repeat("B", replyProofB64)},
	} {
		for _, fail := range []error{nil, status.Error(codes.NotFound, "not found")} {
			server := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
				for _, o := range opts {
					if tr, ok := o.(grpc.TrailerCallOption); ok {
						*tr.TrailerAddr = metadata.MD{mdReplyProof: vals}
					}
				}
				return fail
			}
			err := client(context.Background(), "/xfer.kv.v1.KV/Get", nil, nil, nil, server)
			want := codes.Unauthenticated
			if fail != nil {
				want = codes.NotFound
			}
			if status.Code(err) != want {
				t.Errorf("%s (server's error %v): %v, want %v", name, fail, err, want)
			}
		}
	}
}

package kv

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer/kv/kvpb"
)

// TestFastAllocs: the hand-written decoders and encoders of the hot
// messages do not allocate.
func TestFastAllocs(t *testing.T) {
	b, _ := proto.Marshal(&kvpb.Response{Id: 7, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: 3, Version: 9, Inline: true, Value: []byte("abc")}}})
	q, _ := proto.Marshal(&kvpb.Request{Id: 7, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), InlineMax: 5, ServerId: []byte("x"), Notify: true}}})
	pq, _ := proto.Marshal(&kvpb.Request{Id: 8, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Value{Value: []byte("v")}, ServerId: []byte("x")}}})
	pr, _ := proto.Marshal(&kvpb.Response{Id: 8, Result: &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: 3, Evicted: 1}}})
	out := make([]byte, 0, 256)
	key, value := []byte("key"), make([]byte, 100)
	if n := testing.AllocsPerRun(100, func() {
		parseGetResponse(b)
		parseGetRequest(q)
		parsePutRequest(pq)
		parsePutResponse(pr)
		appendGetRequest(out, 1, key, key, 5, key, true)
		appendGetResponse(out, 1, 100, 2, true, value)
		appendPutRequest(out, 1, key, value, key)
		appendPutResponse(out, 1, 2, 3)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// TestInlineAllocs: a 4 KiB inline GET or PUT on the data-plane request
// path, with the client and the server in this process, allocates nothing,
// client and server together, on tcp and shm (BenchmarkGet and
// BenchmarkPut report the same): the messages go through the send queue
// (Peer.TrySendAppend), with no buffer, batch or channel of their own; the
// request is encoded by the pooled call's own function, not a closure; the
// server answers a PUT without a response object and overwrites an
// unread value in its slot. It fails when a copy of the old path (a
// message buffer and a one-operation batch per message: 3 more per GET,
// as measured with TrySendAppend disabled) comes back. It holds for a
// call whose context has a deadline and for one whose context has none
// (the client's call bound then ends it: no timer context of its own per
// call, which cost 5), also when that context can be cancelled (its calls
// share one timer context per generation); over a context with values,
// its bounded context is one more.
func TestInlineAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			s := startServer(t, ServerOptions{})
			c := dial(t, s.addr, tr)
			buf, err := c.Engine().Alloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			value := make([]byte, 4096)
			ctx := ctxT(t)
			get := func() {
				if n, err := c.GetInto(ctx, "k", buf); err != nil || n != 4096 {
					t.Fatalf("get: %d, %v", n, err)
				}
			}
			put := func() {
				if err := c.Put(ctx, "k", value); err != nil {
					t.Fatalf("put: %v", err)
				}
			}
			for range 200 { // warm up pools and buffers
				put()
				get()
			}
			cancelable, cancel := context.WithCancel(context.Background())
			defer cancel()
			// Stray allocations of the runtime, gRPC or the poller may
			// land in the window: a half over the bound is tolerated.
			for _, tc := range []struct {
				name  string
				ctx   context.Context
				extra float64 // the bounded context of a context with values
			}{
				{"deadline", ctxT(t), 0},
				{"no deadline", context.Background(), 0},
				{"values and no deadline", context.WithValue(context.Background(), valueKey{}, 1), 1},
				{"a cancel and no deadline", cancelable, 0},
			} {
				ctx = tc.ctx
				if n := testing.AllocsPerRun(500, get); n > 0.5+tc.extra {
					t.Errorf("inline GET, context with %s: %v allocations, want at most %v", tc.name, n, tc.extra)
				}
				if n := testing.AllocsPerRun(500, put); n > 0.5+tc.extra {
					t.Errorf("inline PUT, context with %s: %v allocations, want at most %v", tc.name, n, tc.extra)
				}
			}
		})
	}
}

// valueKey is the key of a value in a context.
type valueKey struct{}

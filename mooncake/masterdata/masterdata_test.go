package masterdata

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// env is a master serving gRPC and its data plane on loopback, and a
// client engine.
type env struct {
	svc    *master.Service
	grpc   *master.Client
	data   *Client
	client *xfer.Engine
	srv    *xfer.Engine
}

func open(t *testing.T, cfg xfer.Config) *xfer.Engine {
	t.Helper()
	cfg.Listen, cfg.MemoryMB = "127.0.0.1:0", 1
	e, err := xfer.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func start(t *testing.T) *env {
	t.Helper()
	svc := master.New(master.Options{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { svc.Close() })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := svc.NewGRPCServer("")
	go g.Serve(l)
	t.Cleanup(g.Stop)
	srv := open(t, xfer.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); Serve(ctx, srv, svc, nil) }()
	t.Cleanup(func() { cancel(); srv.Close(); <-served })
	gc, err := master.Dial(context.Background(), l.Addr().String(), master.DialOptions{OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	ce := open(t, xfer.Config{})
	dc, err := Dial(context.Background(), ce, srv.Addr(), Options{OpTimeout: 5 * time.Second, Fallback: gc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dc.Close() })
	return &env{svc: svc, grpc: gc, data: dc, client: ce, srv: srv}
}

var id = []byte("client-0123456789")

// TestCalls makes every call on the data plane and checks the master's
// answers are those gRPC gives.
func TestCalls(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	c := e.data
	if r, err := c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: id, Segment: &masterpb.Segment{Name: "s:1", Base: 1 << 20, Size: 1 << 20}}); err != nil || r.Code != 0 {
		t.Fatalf("mount: %v, %v", r, err)
	}
	if r, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: id}); err != nil || r.Remount {
		t.Fatalf("ping: %v, %v", r, err)
	}
	ps, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id, Key: "k", Size: 100})
	if err != nil || ps.Code != 0 || len(ps.Replicas) != 1 || ps.Replicas[0].Segment != "s:1" {
		t.Fatalf("put start: %v, %v", ps, err)
	}
	if r, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: id, Key: "k", Token: ps.Token}); err != nil || r.Code != 0 {
		t.Fatalf("put end: %v, %v", r, err)
	}
	got, err := c.GetReplicaList(ctx, &masterpb.KeysRequest{ClientId: id, Keys: []string{"k", "absent"}})
	if err != nil || len(got.Objects) != 2 || got.Objects[0].Size != 100 || got.Objects[1].Code != master.CodeObjectNotFound {
		t.Fatalf("get replica list: %v, %v", got, err)
	}
	want, _ := e.grpc.GetReplicaList(ctx, &masterpb.KeysRequest{ClientId: id, Keys: []string{"k", "absent"}})
	if !proto.Equal(got.Objects[1], want.Objects[1]) || !proto.Equal(got.Objects[0].Replicas[0], want.Objects[0].Replicas[0]) {
		t.Fatalf("data plane %v, gRPC %v", got, want)
	}
	if r, err := c.Exist(ctx, &masterpb.KeysRequest{ClientId: id, Keys: []string{"k", "absent"}}); err != nil || r.Codes[0] != 1 || r.Codes[1] != 0 {
		t.Fatalf("exist: %v, %v", r, err)
	}
	if r, err := c.Remove(ctx, &masterpb.RemoveRequest{ClientId: id, Keys: []string{"k"}}); err != nil || r.Codes[0] != master.CodeObjectHasLease {
		t.Fatalf("remove of a leased key: %v, %v", r, err)
	}
	ps2, _ := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id, Key: "k2", Size: 10})
	if r, err := c.PutRevoke(ctx, &masterpb.PutEndRequest{ClientId: id, Key: "k2", Token: ps2.Token}); err != nil || r.Code != 0 {
		t.Fatalf("put revoke: %v, %v", r, err)
	}
	if r, err := c.RemoveByRegex(ctx, &masterpb.RemoveByRegexRequest{ClientId: id, Pattern: "^k", Force: true}); err != nil || r.Count != 1 {
		t.Fatalf("remove by regex: %v, %v", r, err)
	}
	if r, err := c.RemoveAll(ctx, &masterpb.RemoveAllRequest{ClientId: id, Force: true}); err != nil || r.Count != 0 {
		t.Fatalf("remove all: %v, %v", r, err)
	}
	if r, err := c.UnmountSegment(ctx, &masterpb.UnmountSegmentRequest{ClientId: id, Name: "s:1"}); err != nil || r.Code != 0 {
		t.Fatalf("unmount: %v, %v", r, err)
	}
}

// TestLargeCallsGoToGRPC: a batch too large for a message goes on gRPC,
// and so does one whose answer is.
func TestLargeCallsGoToGRPC(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	keys := make([]string, 2000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", strings.Repeat("k", 40), i)
	}
	r, err := e.data.Exist(ctx, &masterpb.KeysRequest{ClientId: id, Keys: keys})
	if err != nil || len(r.Codes) != len(keys) {
		t.Fatalf("a large exist: %d codes, %v", len(r.GetCodes()), err)
	}
	// A small call with a large answer: many objects' replica lists.
	e.data.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: id, Segment: &masterpb.Segment{Name: "s:1", Size: 1 << 30}})
	few := make([]string, 0, 600)
	for i := range 600 {
		k := fmt.Sprintf("o%d", i)
		ps, _ := e.grpc.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id, Key: k, Size: 64})
		e.grpc.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: id, Key: k, Token: ps.Token})
		few = append(few, k)
	}
	g, err := e.data.GetReplicaList(ctx, &masterpb.KeysRequest{ClientId: id, Keys: few})
	if err != nil || len(g.Objects) != len(few) || g.Objects[599].Code != 0 {
		t.Fatalf("a large answer: %d objects, %v", len(g.GetObjects()), err)
	}
}

// TestStrays: frames that do not decode are dropped, an unknown op is
// answered as such, and the master goes on serving.
func TestStrays(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	raw := open(t, xfer.Config{}) // an engine of its own: a peer per engine and address
	p, err := raw.Dial(ctx, e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	answers := make(chan []byte, 4)
	p.Handle(func(msg []byte) { answers <- append([]byte(nil), msg...) })
	for _, junk := range [][]byte{{1}, {opPutStart, 1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff}, {99, 1, 0, 0, 0, 0, 0, 0, 0}} {
		buf, _ := raw.Alloc(len(junk))
		copy(buf.Bytes(), junk)
		if err := p.Send(ctx, buf.Bytes()[:len(junk)]); err != nil {
			t.Fatal(err)
		}
		raw.Free(buf)
	}
	select {
	case a := <-answers:
		if a[0] != opUnknown || a[1] != 1 {
			t.Fatalf("the answer to an unknown op: %x", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to an unknown op")
	}
	if _, err := e.data.Ping(ctx, &masterpb.PingRequest{ClientId: id}); err != nil {
		t.Fatalf("a call after strays: %v", err)
	}
}

// TestMasterGone: calls fail once the master's engine is gone, within
// their deadline, and a closed client refuses calls.
func TestMasterGone(t *testing.T) {
	e := start(t)
	e.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := e.data.Ping(ctx, &masterpb.PingRequest{ClientId: id}); err == nil {
		t.Fatal("a call to a closed master succeeded")
	}
	if d := time.Since(start); d > 9*time.Second {
		t.Fatalf("the call took %v", d)
	}
	e.data.Close()
	if _, err := e.data.Ping(context.Background(), &masterpb.PingRequest{ClientId: id}); !errors.Is(err, xfer.ErrClosed) && !errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("a call on a closed client: %v", err)
	}
}

// FuzzDecodeRequest: any frame decodes to a request or an error, never a
// panic.
func FuzzDecodeRequest(f *testing.F) {
	for op := opMount; op <= opLast; op++ {
		b, _ := appendFrame(nil, op, 7, request(op))
		f.Add(b)
	}
	b, _ := appendFrame(nil, opPutStart, 1, &masterpb.PutStartRequest{ClientId: id, Key: "k", Size: 5})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		op, _, req, err := decodeRequest(msg)
		if err == nil && (req == nil || op < opMount || op > opLast) {
			t.Fatalf("op %d decoded to %v", op, req)
		}
	})
}

package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
	"github.com/xferio/xfer/transport/tcp"
)

// testServer is a real server: gRPC on a loopback port, the data plane on
// another.
type testServer struct {
	*Server
	addr string
	stop func()
}

func startServer(t testing.TB, opts ServerOptions) *testServer {
	t.Helper()
	return startServerAt(t, "127.0.0.1:0", opts)
}

func startServerAt(t testing.TB, addr string, opts ServerOptions) *testServer {
	t.Helper()
	if opts.Engine.Listen == "" {
		opts.Engine.Listen = "127.0.0.1:0"
	}
	if opts.Engine.MemoryMB == 0 {
		opts.Engine.MemoryMB = 32
	}
	if opts.Engine.RDMA.Device == "" {
		opts.Engine.RDMA.Device = rdmaDevice
	}
	s, err := NewServer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var lis net.Listener
	for range 50 { // a restarted server may find its port in TIME_WAIT briefly
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	ts := &testServer{Server: s, addr: lis.Addr().String()}
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(ts.stop)
	return ts
}

func dial(t testing.TB, addr string, policy xfer.Policy) *Client {
	t.Helper()
	return dialMode(t, addr, policy, "")
}

var modes = []string{RequestsData, RequestsGRPC}

func dialMode(t testing.TB, addr string, policy xfer.Policy, mode string) *Client {
	t.Helper()
	return dialOpts(t, addr, ClientOptions{EngineConfig: xfer.Config{Transport: policy, MemoryMB: 16}, Requests: mode})
}

func dialOpts(t testing.TB, addr string, opts ClientOptions) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts.EngineConfig.RDMA.Device = rdmaDevice
	c, err := Dial(ctx, addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>9)
	}
	return b
}

// canary allocates n bytes of e's memory filled with fill, freed when the
// test ends: a buffer that requests the server refuses must leave as it
// was (see untouched).
func canary(t *testing.T, e *xfer.Engine, n int, fill byte) xfer.Buffer {
	t.Helper()
	buf, err := e.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Free(buf) })
	for i := range buf.Bytes() {
		buf.Bytes()[i] = fill
	}
	return buf
}

// untouched fails the test if a byte of a canary is no longer fill.
func untouched(t *testing.T, buf xfer.Buffer, fill byte, what string) {
	t.Helper()
	if i := slices.IndexFunc(buf.Bytes(), func(b byte) bool { return b != fill }); i >= 0 {
		t.Fatalf("byte %d of %s changed", i, what)
	}
}

var transports = []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM}

func TestPutGetDelete(t *testing.T) {
	for _, tr := range transports {
		for _, mode := range modes {
			t.Run(string(tr)+"/"+mode, func(t *testing.T) { testPutGetDelete(t, tr, mode) })
		}
	}
}

func testPutGetDelete(t *testing.T, tr xfer.Policy, mode string) {
	{
		{
			s := startServer(t, ServerOptions{})
			c := dialMode(t, "http://"+s.addr, tr, mode)
			ctx := ctxT(t)
			if got := c.Transport(); got != string(tr) {
				t.Fatalf("data plane on %q, want %q", got, tr)
			}
			before := s.Snapshot()
			sizes := []int{0, 1, 100, DefaultInlineMaxSHM, DefaultInlineMaxSHM + 1, DefaultInlineMax, DefaultInlineMax + 1, 64 << 10, 1 << 20, 3 << 20}
			limit := DefaultInlineMax
			if tr != xfer.PolicyTCP {
				limit = DefaultInlineMaxSHM // a one-sided transfer is one copy
			}
			for i, n := range sizes {
				key := fmt.Sprintf("key-%d", n)
				want := pattern(n, byte(i))
				if err := c.Put(ctx, key, want); err != nil {
					t.Fatalf("put %d bytes: %v", n, err)
				}
				got, err := c.Get(ctx, key)
				if err != nil {
					t.Fatalf("get %d bytes: %v", n, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("get %d bytes: value differs", n)
				}
			}
			// Small values went inline, large ones on the data plane.
			var inline, plane uint64
			for _, n := range sizes {
				if n <= limit {
					inline += 2 * uint64(n)
				} else {
					plane += 2 * uint64(n)
				}
			}
			// The server counts a GET's bytes once its write completes,
			// which may be just after the client has the value (a
			// notification answers it).
			waitFor(t, 10*time.Second, "the server to count the last GET", func() bool {
				return s.Snapshot().DataPlaneBytes-before.DataPlaneBytes >= plane
			})
			after := s.Snapshot()
			if d := after.InlineBytes - before.InlineBytes; d != inline {
				t.Errorf("inline bytes %d, want %d", d, inline)
			}
			if d := after.DataPlaneBytes - before.DataPlaneBytes; d != plane {
				t.Errorf("data-plane bytes %d, want %d", d, plane)
			}
			if after.Keys != uint64(len(sizes)) {
				t.Errorf("keys %d, want %d", after.Keys, len(sizes))
			}

			// PUT overwrites.
			if err := c.Put(ctx, "key-1", []byte("new")); err != nil {
				t.Fatal(err)
			}
			if got, err := c.Get(ctx, "key-1"); err != nil || string(got) != "new" {
				t.Fatalf("after overwrite: %q, %v", got, err)
			}
			// DELETE (the GET's read lease holds the value: forced), then
			// GET and DELETE of the missing key.
			var le *LeaseError
			if err := c.Delete(ctx, "key-1"); !errors.As(err, &le) || !errors.Is(err, ErrHasLease) || le.Left <= 0 {
				t.Fatalf("delete of a value just read: %v, want a *LeaseError", err)
			}
			if err := c.DeleteWith(ctx, "key-1", DeleteOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, "key-1"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not found") {
				t.Fatalf("get after delete: %v, want not found", err)
			}
			if err := c.Delete(ctx, "key-1"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("delete of a missing key: %v, want not found", err)
			}
		}
	}
}

// TestZeroCopyBuffers: GetInto writes into the caller's buffer, PutBuffer
// reads from it, and a value larger than the buffer gets the size it needs.
func TestZeroCopyBuffers(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			s := startServer(t, ServerOptions{})
			c := dial(t, s.addr, tr)
			ctx := ctxT(t)
			const n = 256 << 10
			src, err := c.Engine().Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Engine().Free(src)
			copy(src.Bytes(), pattern(n, 3))
			if err := c.PutBuffer(ctx, "z", src, n); err != nil {
				t.Fatal(err)
			}
			dst, err := c.Engine().Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Engine().Free(dst)
			got, err := c.GetInto(ctx, "z", dst)
			if err != nil || got != n || !bytes.Equal(dst.Bytes()[:n], pattern(n, 3)) {
				t.Fatalf("GetInto: %d, %v (data equal: %v)", got, err, bytes.Equal(dst.Bytes()[:n], pattern(n, 3)))
			}
			small := canary(t, c.Engine(), DefaultInlineMax+100, 0xEE)
			_, err = c.GetInto(ctx, "z", small)
			var tooSmall *BufferTooSmallError
			if !errors.As(err, &tooSmall) || tooSmall.Needed != n || tooSmall.Have != uint64(small.Len()) {
				t.Fatalf("GetInto a small buffer: %v, want BufferTooSmallError{%d, %d}", err, n, small.Len())
			}
			if !strings.Contains(err.Error(), fmt.Sprint(n)) {
				t.Errorf("error %q does not state the size needed", err)
			}
			untouched(t, small, 0xEE, "the buffer of a refused GET")
		})
	}
}

func TestServerAddrForms(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"127.0.0.1:50051", "127.0.0.1:50051", ""},
		{"http://127.0.0.1:50051", "127.0.0.1:50051", ""},
		{"http://host:1/", "host:1", ""},
		{"[::1]:7", "[::1]:7", ""},
		{"https://h:1", "", "TLS"},
		{"h", "", "HOST:PORT"},
		{"http://h/x", "", "HOST:PORT"},
	} {
		got, err := ParseAddr(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseAddr(%q): %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseAddr(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestBadRequests: every bad request gets a clear error, the server keeps
// serving, and nothing stored changes.
func TestBadRequests(t *testing.T) {
	s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 8}, MaxValue: 4 << 20})
	c := dial(t, s.addr, xfer.PolicyTCP)
	ctx := ctxT(t)
	good := pattern(100<<10, 9)
	if err := c.Put(ctx, "good", good); err != nil {
		t.Fatal(err)
	}
	check := func(name string, err error, want error, text string) {
		t.Helper()
		if err == nil || (want != nil && !errors.Is(err, want)) || !strings.Contains(err.Error(), text) {
			t.Errorf("%s: %v; want %v with %q", name, err, want, text)
		}
		got, gerr := c.Get(ctx, "good")
		if gerr != nil || !bytes.Equal(got, good) {
			t.Fatalf("after %s: the server no longer serves: %v", name, gerr)
		}
	}
	check("empty key", c.Put(ctx, "", []byte("x")), ErrInvalid, "empty key")
	_, err := c.Get(ctx, "")
	check("empty key get", err, ErrInvalid, "empty key")
	long := strings.Repeat("k", DefaultMaxKey+1)
	check("oversized key", c.Put(ctx, long, []byte("x")), ErrInvalid, "longer than the limit")
	_, err = c.Get(ctx, long)
	check("oversized key get", err, ErrInvalid, "longer than the limit")
	check("delete oversized key", c.Delete(ctx, long), ErrInvalid, "longer than the limit")
	_, err = c.Get(ctx, "missing")
	check("missing key", err, ErrNotFound, "not found")
	check("value over the limit", c.Put(ctx, "big", make([]byte, 5<<20)), ErrInvalid, "limit")

	// Requests the Client never sends, straight to the gRPC service.
	rpc := c.rpc
	buf := canary(t, c.Engine(), 128<<10, 0x5A)
	desc := buf.Desc()
	enc := func(d xfer.RegionDesc) []byte { b, _ := d.MarshalBinary(); return b }
	outside := desc
	outside.Addr += 1 << 30 // far beyond the client's region
	wrongKey := desc
	wrongKey.Key ^= 0xdeadbeef
	// A value larger than the whole pool.
	huge := desc
	huge.Len = 1 << 40
	codeOf := func(err error) codes.Code { return status.Code(err) }
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		text string
	}{
		{"get into a buffer outside the client's memory", func() error {
			_, err := rpc.Get(ctx, &kvpb.GetRequest{Key: []byte("good"), Buffer: enc(outside)})
			return err
		}, codes.InvalidArgument, "refused by the client's engine"},
		{"get with a wrong key", func() error {
			_, err := rpc.Get(ctx, &kvpb.GetRequest{Key: []byte("good"), Buffer: enc(wrongKey)})
			return err
		}, codes.InvalidArgument, "refused by the client's engine"},
		{"put from a buffer outside the client's memory", func() error {
			d := outside
			d.Len = 100 << 10
			_, err := rpc.Put(ctx, &kvpb.PutRequest{Key: []byte("good"), Source: &kvpb.PutRequest_Buffer{Buffer: enc(d)}})
			return err
		}, codes.InvalidArgument, "refused by the client's engine"},
		{"put larger than the whole pool", func() error {
			_, err := rpc.Put(ctx, &kvpb.PutRequest{Key: []byte("good"), Source: &kvpb.PutRequest_Buffer{Buffer: enc(huge)}})
			return err
		}, codes.InvalidArgument, "larger than the whole pool"},
		{"put without a value", func() error {
			_, err := rpc.Put(ctx, &kvpb.PutRequest{Key: []byte("good")})
			return err
		}, codes.InvalidArgument, "needs a value"},
		{"malformed descriptor", func() error {
			_, err := rpc.Get(ctx, &kvpb.GetRequest{Key: []byte("good"), Buffer: []byte("garbage")})
			return err
		}, codes.InvalidArgument, "buffer descriptor"},
		{"oversized inline put", func() error {
			_, err := rpc.Put(ctx, &kvpb.PutRequest{Key: []byte("good"), Source: &kvpb.PutRequest_Value{Value: make([]byte, DefaultInlineMax+1)}})
			return err
		}, codes.InvalidArgument, "inline limit"},
		{"get without a buffer", func() error {
			_, err := rpc.Get(ctx, &kvpb.GetRequest{Key: []byte("good")})
			return err
		}, codes.FailedPrecondition, "at least 102400 bytes"},
		{"old protocol", func() error {
			_, err := rpc.Hello(ctx, &kvpb.HelloRequest{Protocol: 0})
			return err
		}, codes.FailedPrecondition, "protocol"},
	} {
		err := tc.call()
		if codeOf(err) != tc.code || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want %v with %q", tc.name, err, tc.code, tc.text)
		}
		check(tc.name, err, nil, "")
	}
	untouched(t, buf, 0x5A, "the client's buffer")

	// A malformed gRPC request: bytes that are not a protobuf message.
	conn, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, method := range []string{"Get", "Put", "Delete", "Hello"} {
		var out rawMsg
		err := conn.Invoke(ctx, "/xfer.kv.v1.KV/"+method, rawMsg{0xff, 0xff, 0xff, 0x07, 0x01}, &out, grpc.ForceCodecV2(rawCodec{}))
		if err == nil || !strings.Contains(err.Error(), "unmarshal") {
			t.Errorf("malformed %s request: %v, want an unmarshalling error", method, err)
		}
		check("malformed "+method, err, nil, "")
	}
	if st := s.Snapshot(); st.Keys != 1 {
		t.Errorf("%d keys after bad requests, want 1", st.Keys)
	}
}

// TestEvictionAndReject: a full pool evicts least recently used values by
// default, or refuses PUTs with a "full" error; stats count both.
func TestEvictionAndReject(t *testing.T) {
	const val = 256 << 10
	t.Run("evict", func(t *testing.T) {
		s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 2}})
		c := dial(t, s.addr, xfer.PolicyTCP)
		ctx := ctxT(t)
		for i := range 7 {
			if err := c.Put(ctx, fmt.Sprint(i), pattern(val, byte(i))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Get(ctx, "0"); err != nil { // 0 is now the most recent
			t.Fatal(err)
		}
		for i := 7; i < 10; i++ {
			if err := c.Put(ctx, fmt.Sprint(i), pattern(val, byte(i))); err != nil {
				t.Fatalf("put %d into a full pool: %v", i, err)
			}
		}
		st := s.Snapshot()
		if st.Evictions == 0 || st.FullPolicy != Evict {
			t.Fatalf("stats %+v: want evictions", st)
		}
		if _, err := c.Get(ctx, "0"); err != nil {
			t.Errorf("the recently read key was evicted: %v", err)
		}
		if _, err := c.Get(ctx, "1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("the least recently used key survived: %v", err)
		}
		for i := 7; i < 10; i++ {
			got, err := c.Get(ctx, fmt.Sprint(i))
			if err != nil || !bytes.Equal(got, pattern(val, byte(i))) {
				t.Fatalf("get %d: %v", i, err)
			}
		}
	})
	// A value of 256 KiB moves by a one-sided READ; one of 16 KiB travels
	// inline and takes the server's fast path, which words its refusal as
	// the full path does.
	for _, size := range []int{val, 16 << 10} {
		t.Run(fmt.Sprintf("reject %d", size), func(t *testing.T) {
			s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 2}, Full: Reject})
			c := dial(t, s.addr, xfer.PolicyTCP)
			ctx := ctxT(t)
			var err error
			i := 0
			for ; i < 200 && err == nil; i++ {
				err = c.Put(ctx, fmt.Sprint(i), pattern(size, byte(i)))
			}
			if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "full") {
				t.Fatalf("put into a full pool: %v, want ErrFull", err)
			}
			st := s.Snapshot()
			moved := st.DataPlaneBytes
			if size <= DefaultInlineMax {
				moved = st.InlineBytes
			}
			if st.RejectedFull != 1 || st.Evictions != 0 || st.FullPolicy != Reject || st.Keys != uint64(i-1) || moved == 0 {
				t.Fatalf("stats %+v after %d puts", st, i)
			}
			for j := range i - 1 {
				got, err := c.Get(ctx, fmt.Sprint(j))
				if err != nil || !bytes.Equal(got, pattern(size, byte(j))) {
					t.Fatalf("get %d after a rejected put: %v", j, err)
				}
			}
			if _, err := c.Get(ctx, fmt.Sprint(i-1)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("the rejected put left a value: %v", err)
			}
			if err := c.DeleteWith(ctx, "0", DeleteOptions{Force: true}); err != nil { // read above: leased
				t.Fatal(err)
			}
			if err := c.Put(ctx, "again", pattern(size, 1)); err != nil {
				t.Fatalf("put after a delete made room: %v", err)
			}
		})
	}
}

// TestNoTornReads: GETs racing PUTs of the same key always see one whole
// value.
func TestNoTornReads(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 16}})
			w := dial(t, s.addr, tr)
			r := dial(t, s.addr, tr)
			ctx := ctxT(t)
			const n = 512 << 10
			if err := w.Put(ctx, "k", bytes.Repeat([]byte{0}, n)); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 1; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := w.Put(ctx, "k", bytes.Repeat([]byte{byte(i)}, n)); err != nil {
						t.Error(err)
						return
					}
				}
			})
			reads := 200
			if testing.Short() {
				reads = 50
			}
			for range reads {
				v, err := r.Get(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if len(v) != n || bytes.Count(v, v[:1]) != n {
					t.Fatalf("torn value: first byte %d, %d bytes equal to it of %d", v[0], bytes.Count(v, v[:1]), len(v))
				}
			}
			close(stop)
			wg.Wait()
			// The last GET's server keeps its slot until its write
			// completes, which may be just after the client has the
			// value (a notification answers it).
			waitFor(t, 10*time.Second, "the pool to hold one value", func() bool {
				return s.Snapshot().PoolUsed == roundUp(n)
			}, func() string { return fmt.Sprintf("pool holds %d bytes, want %d", s.Snapshot().PoolUsed, roundUp(n)) })
		})
	}
}

func roundUp(n uint64) uint64 { return (n + 63) &^ 63 }

// TestServerRestart: clients reconnect by themselves, and a call made while
// the server is down completes once it is back.
func TestServerRestart(t *testing.T) {
	for _, tr := range transports {
		for _, mode := range modes {
			t.Run(string(tr)+"/"+mode, func(t *testing.T) { testServerRestart(t, tr, mode) })
		}
	}
}

func testServerRestart(t *testing.T, tr xfer.Policy, mode string) {
	{
		{
			s := startServer(t, ServerOptions{})
			addr := s.addr
			c := dialMode(t, addr, tr, mode)
			ctx := ctxT(t)
			if err := c.Put(ctx, "a", pattern(100<<10, 1)); err != nil {
				t.Fatal(err)
			}
			s.stop()
			errc := make(chan error, 1)
			go func() { errc <- c.Put(ctx, "b", pattern(100<<10, 2)) }()
			time.Sleep(300 * time.Millisecond)
			select {
			case err := <-errc:
				t.Fatalf("a put to a stopped server returned %v", err)
			default:
			}
			s2 := startServerAt(t, addr, ServerOptions{})
			if err := <-errc; err != nil {
				t.Fatalf("put across the restart: %v", err)
			}
			if _, err := c.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get from the new server: %v, want not found", err)
			}
			got, err := c.Get(ctx, "b")
			if err != nil || !bytes.Equal(got, pattern(100<<10, 2)) {
				t.Fatalf("get after the restart: %v", err)
			}
			if st := s2.Snapshot(); st.Keys != 1 {
				t.Fatalf("new server has %d keys", st.Keys)
			}
		}
	}
}

// TestDeadlineWhileServerDown: calls honour their context.
func TestDeadlineWhileServerDown(t *testing.T) {
	s := startServer(t, ServerOptions{})
	c := dial(t, s.addr, xfer.PolicyTCP)
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get from a stopped server: %v, want a deadline error", err)
	}
}

// rawMsg and rawCodec send bytes as they are, to feed gRPC malformed
// requests.
type rawMsg []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawMsg))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMsg) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestSeveralDataPlanes: with Devices > 1 the server runs one engine per
// device (here tcp listeners), clients spread over them, and every engine
// moves values of the one pool.
func TestSeveralDataPlanes(t *testing.T) {
	s := startServer(t, ServerOptions{Devices: 2, Engine: xfer.Config{Transport: xfer.PolicyTCP}})
	if n := len(s.DataAddrs()); n != 2 {
		t.Fatalf("%d data addresses, want 2", n)
	}
	ctx := ctxT(t)
	used := map[string]bool{}
	for i := range 16 {
		c := dial(t, s.addr, xfer.PolicyTCP)
		v := pattern(200<<10, byte(i))
		if err := c.Put(ctx, fmt.Sprint(i), v); err != nil {
			t.Fatal(err)
		}
		got, err := c.Get(ctx, fmt.Sprint((i+1)%16))
		if i < 15 && !errors.Is(err, ErrNotFound) {
			t.Fatalf("get of a key not put yet: %v", err)
		}
		got, err = c.Get(ctx, fmt.Sprint(i))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get: %v", err)
		}
		c.mu.Lock()
		used[c.sess.addr] = true
		c.mu.Unlock()
	}
	if len(used) != 2 {
		t.Fatalf("16 clients used data addresses %v, want both", used)
	}
	if _, err := NewServer(context.Background(), ServerOptions{Devices: 2, Engine: xfer.Config{Transport: xfer.PolicyRDMA}}); err == nil || !strings.Contains(err.Error(), "RDMA devices") {
		t.Fatalf("two rdma devices on a host without them: %v", err)
	}
}

// TestMalformedDataPlaneRequests: messages on the data plane that are not
// requests are dropped, and the client's requests keep working.
func TestMalformedDataPlaneRequests(t *testing.T) {
	s := startServer(t, ServerOptions{})
	c := dial(t, s.addr, xfer.PolicyTCP)
	ctx := ctxT(t)
	if err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	p := c.sess.peer
	c.mu.Unlock()
	b, err := c.Engine().Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Engine().Free(b)
	for i, m := range [][]byte{{0xff, 0xff, 0xff}, {0x08}, bytes.Repeat([]byte{0x12}, 4000), {}} {
		n := copy(b.Bytes(), m)
		if err := p.Send(ctx, b.Bytes()[:n]); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if got, err := c.Get(ctx, "k"); err != nil || string(got) != "v" {
		t.Fatalf("get after malformed messages: %q, %v", got, err)
	}
}

// TestFastEncoding: the hand-written encoders produce what proto.Marshal
// does, so the other side may decode either way.
func TestFastEncoding(t *testing.T) {
	for _, tc := range []struct {
		id, inlineMax    uint64
		key, buf, server []byte
		notify           bool
	}{
		{1, 4096, []byte("k"), []byte{1, 2, 3}, []byte("server"), true},
		{0, 0, nil, nil, nil, false},
		{1 << 40, 1, bytes.Repeat([]byte("x"), 300), nil, []byte{0}, false},
		{0, 0, nil, nil, nil, true},
	} {
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&kvpb.Request{Id: tc.id, Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: tc.key, Buffer: tc.buf, InlineMax: tc.inlineMax, ServerId: tc.server, Notify: tc.notify}}})
		if got := appendGetRequest(nil, tc.id, tc.key, tc.buf, tc.inlineMax, tc.server, tc.notify); !bytes.Equal(got, want) {
			t.Errorf("request %+v:\n got %x\nwant %x", tc, got, want)
		}
	}
	for _, tc := range []struct {
		id, length, version uint64
		inline              bool
		value               []byte
	}{
		{1, 3, 9, true, []byte("abc")},
		{2, 1 << 20, 1, false, nil},
		{0, 0, 0, true, nil},
		{5, 300, 1 << 33, true, bytes.Repeat([]byte("v"), 300)},
	} {
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&kvpb.Response{Id: tc.id, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: tc.length, Version: tc.version, Inline: tc.inline, Value: tc.value}}})
		if got := appendGetResponse(nil, tc.id, tc.length, tc.version, tc.inline, tc.value); !bytes.Equal(got, want) {
			t.Errorf("response %+v:\n got %x\nwant %x", tc, got, want)
		}
	}
	for _, tc := range []struct {
		id                 uint64
		key, value, server []byte
	}{
		{1, []byte("k"), []byte("value"), []byte("server")},
		{0, nil, []byte{}, nil}, // an empty value is still set (a oneof)
		{1 << 40, bytes.Repeat([]byte("x"), 300), bytes.Repeat([]byte("v"), 5000), []byte{0}},
	} {
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&kvpb.Request{Id: tc.id, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: tc.key, Source: &kvpb.PutRequest_Value{Value: tc.value}, ServerId: tc.server}}})
		got := appendPutRequest(nil, tc.id, tc.key, tc.value, tc.server)
		if !bytes.Equal(got, want) {
			t.Errorf("put request %d (key %d bytes, value %d):\n got %.64x\nwant %.64x", tc.id, len(tc.key), len(tc.value), got, want)
		}
		r, ok := parsePutRequest(got)
		if !ok || r.id != tc.id || !bytes.Equal(r.key, tc.key) || !bytes.Equal(r.value, tc.value) || r.value == nil || !bytes.Equal(r.serverID, tc.server) {
			t.Errorf("put request %d decodes to id %d, key %d bytes, value %d, ok %v", tc.id, r.id, len(r.key), len(r.value), ok)
		}
	}
	for _, tc := range []struct {
		id, version uint64
		evicted     uint32
	}{
		{1, 9, 0},
		{0, 0, 0},
		{7, 1 << 33, 3},
	} {
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&kvpb.Response{Id: tc.id, Result: &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: tc.version, Evicted: tc.evicted}}})
		got := appendPutResponse(nil, tc.id, tc.version, tc.evicted)
		if !bytes.Equal(got, want) {
			t.Errorf("put response %+v:\n got %x\nwant %x", tc, got, want)
		}
		if r, ok := parsePutResponse(got); !ok || r.id != tc.id || r.version != tc.version || r.evicted != tc.evicted {
			t.Errorf("put response %+v decodes to %+v, %v", tc, r, ok)
		}
	}
	// A PUT from a buffer, and an error response, take the full path.
	b, _ := proto.Marshal(&kvpb.Request{Id: 3, Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("k"), Source: &kvpb.PutRequest_Buffer{Buffer: []byte{1}}}}})
	if r, ok := parsePutRequest(b); ok {
		t.Errorf("a put from a buffer decodes as inline: %+v", r)
	}
	b, _ = proto.Marshal(&kvpb.Response{Id: 3, Code: 8, Message: "full", Result: &kvpb.Response_Put{Put: &kvpb.PutResponse{}}})
	if r, ok := parsePutResponse(b); ok {
		t.Errorf("an error response decodes as a success: %+v", r)
	}
}

// TestDataPlaneRequestsNameOwnBuffers: a request on the data plane that
// names another engine's buffer is refused, and that buffer is untouched.
func TestDataPlaneRequestsNameOwnBuffers(t *testing.T) {
	s := startServer(t, ServerOptions{})
	a := dial(t, s.addr, xfer.PolicyTCP)
	b := dial(t, s.addr, xfer.PolicyTCP)
	ctx := ctxT(t)
	if err := a.Put(ctx, "k", pattern(100<<10, 1)); err != nil {
		t.Fatal(err)
	}
	victim := canary(t, b.Engine(), 128<<10, 0x77)
	desc, _ := victim.Desc().MarshalBinary()
	a.mu.Lock()
	sess := a.sess
	a.mu.Unlock()
	_, err := a.call(ctx, sess, &kvpb.Request{Op: &kvpb.Request_Get{Get: &kvpb.GetRequest{Key: []byte("k"), Buffer: desc}}}, nil, nil)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not to the sender") {
		t.Fatalf("get into another engine's buffer: %v", err)
	}
	_, err = a.call(ctx, sess, &kvpb.Request{Op: &kvpb.Request_Put{Put: &kvpb.PutRequest{Key: []byte("stolen"), Source: &kvpb.PutRequest_Buffer{Buffer: desc}}}}, nil, nil)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("put from another engine's buffer: %v", err)
	}
	untouched(t, victim, 0x77, "the other engine's buffer")
	if _, err := a.Get(ctx, "stolen"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused put stored a value: %v", err)
	}
}

// TestPollSpinDefault: the KV service's engines spin DefaultPollSpin unless
// their configuration says otherwise.
func TestPollSpinDefault(t *testing.T) {
	s := startServer(t, ServerOptions{})
	if got := s.Engine().Config().TCP.PollSpin; got != DefaultPollSpin {
		t.Errorf("server engine poll_spin %v, want %v", got, DefaultPollSpin)
	}
	c := dial(t, s.addr, xfer.PolicyTCP)
	if got := c.Engine().Config().TCP.PollSpin; got != DefaultPollSpin {
		t.Errorf("client engine poll_spin %v, want %v", got, DefaultPollSpin)
	}
	c = dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{TCP: tcp.Config{PollSpin: -1}}})
	if got := c.Engine().Config().TCP.PollSpin; got >= 0 {
		t.Errorf("client engine poll_spin %v, want off (-1ns)", got)
	}
	s = startServer(t, ServerOptions{Engine: xfer.Config{TCP: tcp.Config{PollSpin: 7 * time.Microsecond}}})
	if got := s.Engine().Config().TCP.PollSpin; got != 7*time.Microsecond {
		t.Errorf("server engine poll_spin %v, want the configured 7µs", got)
	}
}

// TestOnNotify: a notification answers the GET whose id it carries (the
// low 32 bits, also across a wrap of them), never a PUT's call or an
// unknown id, and one longer than the caller's buffer is an error.
func TestOnNotify(t *testing.T) {
	c := &Client{}
	sess := &session{pending: map[uint64]*pendingCall{}, nextID: 1<<32 + 5}
	newCall := func(id uint64, notify bool) *pendingCall {
		pc := &pendingCall{ch: make(chan *kvpb.Response, 1), dst: make([]byte, 100), notify: notify}
		sess.pending[id] = pc
		return pc
	}
	get := newCall(1<<32-2, true) // issued before the low 32 bits wrapped
	put := newCall(1<<32+3, false)
	other := newCall(1<<32+4, true)
	c.onNotify(sess, xfer.Notification{Value: 3, Len: 10})     // the PUT's id
	c.onNotify(sess, xfer.Notification{Value: 12345, Len: 10}) // nobody's
	if len(sess.pending) != 3 || len(put.ch) != 0 {
		t.Fatalf("a notification answered a PUT or an unknown call: %d pending", len(sess.pending))
	}
	c.onNotify(sess, xfer.Notification{Value: 1<<32 - 2, Len: 60})
	select {
	case r := <-get.ch:
		if g := r.GetGet(); g == nil || g.Length != 60 || r.Code != 0 {
			t.Fatalf("response %v, want a GET of 60 bytes", r)
		}
	default:
		t.Fatal("the GET got no response")
	}
	c.onNotify(sess, xfer.Notification{Value: 4, Len: 101})
	r := <-other.ch
	if _, err := result(r); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "101 bytes for a buffer of 100") {
		t.Fatalf("oversized notification: %v", err)
	}
	if _, ok := sess.pending[1<<32+3]; !ok || len(sess.pending) != 1 {
		t.Fatalf("pending after the answers: %v", sess.pending)
	}
}

// Devices N > 1 where rdma may carry the data plane is one engine over N
// rails: the host's first N devices, or the ones the RDMA config names;
// too few devices is an error that lists the host's.
func TestDevicesAsRails(t *testing.T) {
	have := []string{"mlx5_0", "mlx5_1", "mlx5_2"}
	got, err := railsOptions(ServerOptions{Devices: 2}, have, nil)
	if err != nil || got.Devices != 1 || !slices.Equal(got.Engine.RDMA.Devices, []string{"mlx5_0", "mlx5_1"}) {
		t.Fatalf("devices 2 on %v: %v devices, rails %v, %v; want one engine over mlx5_0 and mlx5_1", have, got.Devices, got.Engine.RDMA.Devices, err)
	}
	named := ServerOptions{Devices: 2, Engine: xfer.Config{RDMA: xfer.RDMAConfig{Devices: []string{"mlx5_2", "mlx5_0"}}}}
	got, err = railsOptions(named, have, nil)
	if err != nil || got.Devices != 1 || !slices.Equal(got.Engine.RDMA.Devices, []string{"mlx5_2", "mlx5_0"}) {
		t.Fatalf("devices 2 with rdma.devices named: %v devices, rails %v, %v; want the named ones", got.Devices, got.Engine.RDMA.Devices, err)
	}
	if _, err := railsOptions(ServerOptions{Devices: 4}, have, nil); err == nil || !strings.Contains(err.Error(), "[mlx5_0 mlx5_1 mlx5_2]") {
		t.Fatalf("devices 4 on a host with 3: %v; want an error listing them", err)
	}
	if _, err := railsOptions(ServerOptions{Devices: 2}, nil, errors.New("no libibverbs")); err == nil || !strings.Contains(err.Error(), "no libibverbs") {
		t.Fatalf("devices 2 where the devices cannot be listed: %v; want why", err)
	}
}

package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/kv/kvpb"
)

// testClock is a clock the test moves (ServerOptions.now).
type testClock struct{ t atomic.Int64 }

func (c *testClock) now() int64              { return c.t.Load() }
func (c *testClock) advance(d time.Duration) { c.t.Add(int64(d)) }

// semServer is a server with a 1 MiB pool on the test's clock, and a
// client of it; quarter is a quarter of the pool.
func semServer(t *testing.T, opts ServerOptions) (s *testServer, c *Client, clk *testClock, quarter int) {
	t.Helper()
	clk = &testClock{}
	clk.t.Store(1)
	opts.Engine.MemoryMB = 1
	opts.now = clk.now
	s = startServer(t, opts)
	c = dial(t, s.addr, xfer.PolicyTCP)
	return s, c, clk, int(s.e.Pool().Stats().Capacity / 4)
}

// holds reports whether the server stores key, without a GET (which would
// renew its lease).
func (s *testServer) holds(key string) bool {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.m[key] != nil
}

// holding lists which of keys the server stores.
func (s *testServer) holding(keys ...string) []string {
	var out []string
	for _, k := range keys {
		if s.holds(k) {
			out = append(out, k)
		}
	}
	return out
}

// TestLeaseBlocksDelete: a GET leases the value for LeaseTTL; a DELETE in
// the meantime is refused with a *LeaseError and removes nothing, unless
// forced; once the lease ends the DELETE goes through.
func TestLeaseBlocksDelete(t *testing.T) {
	const ttl = 2 * time.Second
	s, c, clk, _ := semServer(t, ServerOptions{LeaseTTL: ttl})
	ctx := ctxT(t)
	for _, k := range []string{"a", "b"} {
		if err := c.Put(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(ttl - time.Millisecond)
	var le *LeaseError
	err := c.Delete(ctx, "a")
	if !errors.As(err, &le) || !errors.Is(err, ErrHasLease) || MooncakeCode(err) != CodeObjectHasLease {
		t.Fatalf("delete within the lease: %v, want a *LeaseError", err)
	}
	if le.Left != time.Millisecond || !strings.Contains(err.Error(), "read lease") {
		t.Errorf("lease error %q, left %v: want 1ms left", err, le.Left)
	}
	if !s.holds("a") {
		t.Fatal("a refused delete removed the value")
	}
	// Forced, a DELETE removes a leased value.
	if err := c.DeleteWith(ctx, "b", DeleteOptions{Force: true}); err != nil {
		t.Fatalf("forced delete: %v", err)
	}
	if s.holds("b") {
		t.Fatal("forced delete left the value")
	}
	// A GET renews the lease.
	if _, err := c.Get(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	clk.advance(ttl - time.Millisecond)
	if err := c.Delete(ctx, "a"); !errors.Is(err, ErrHasLease) {
		t.Fatalf("delete within the renewed lease: %v", err)
	}
	clk.advance(time.Millisecond)
	if err := c.Delete(ctx, "a"); err != nil {
		t.Fatalf("delete once the lease ended: %v", err)
	}
	// A PUT grants no lease.
	if err := c.Put(ctx, "c", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "c"); err != nil {
		t.Fatalf("delete of a value never read: %v", err)
	}
}

// TestNoLeases: with a negative LeaseTTL a value just read may be deleted.
func TestNoLeases(t *testing.T) {
	_, c, _, _ := semServer(t, ServerOptions{LeaseTTL: -1})
	ctx := ctxT(t)
	if err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatalf("delete without leases: %v", err)
	}
}

// TestLeaseBlocksEviction: values read within the lease are not evicted,
// neither at the high watermark nor for a PUT that does not fit; once the
// lease ends they are, least recently used first.
func TestLeaseBlocksEviction(t *testing.T) {
	const ttl = 2 * time.Second
	s, c, clk, q := semServer(t, ServerOptions{LeaseTTL: ttl})
	ctx := ctxT(t)
	put := func(k string) {
		t.Helper()
		if err := c.Put(ctx, k, pattern(q, k[0])); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	all := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range all[:3] {
		put(k)
	}
	for _, k := range all[:3] {
		if v, err := c.Get(ctx, k); err != nil || !bytes.Equal(v, pattern(q, k[0])) {
			t.Fatalf("get %s: %v", k, err)
		}
	}
	put("d") // the pool is full, past the watermark: nothing may go
	if got := s.holding(all...); !slices.Equal(got, all[:4]) {
		t.Fatalf("after d: %v", got)
	}
	put("e") // does not fit: d, never read, goes
	if got := s.holding(all...); !slices.Equal(got, []string{"a", "b", "c", "e"}) {
		t.Fatalf("after e: %v", got)
	}
	clk.advance(ttl)
	put("f") // the leases ended: a, then b (at the watermark) go
	if got := s.holding(all...); !slices.Equal(got, []string{"c", "e", "f"}) {
		t.Fatalf("after the leases ended: %v", got)
	}
	if st := s.Snapshot(); st.Evictions != 3 || st.RejectedFull != 0 {
		t.Errorf("evictions %d, rejected %d: want 3, 0", st.Evictions, st.RejectedFull)
	}
	// Every value leased: a PUT that does not fit is refused.
	for _, k := range []string{"c", "e", "f"} {
		if _, err := c.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	put("g")
	if _, err := c.Get(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	err := c.Put(ctx, "h", pattern(q, 'h'))
	if !errors.Is(err, ErrFull) || MooncakeCode(err) != CodeNoAvailableHandle {
		t.Fatalf("put into a pool of leased values: %v, want ErrFull", err)
	}
}

// TestSoftPin: soft-pinned values are evicted after every unpinned one;
// with KeepSoftPinned not at all while their pin lasts; and the pin ends
// with its TTL (the server's default when the PUT names none).
func TestSoftPin(t *testing.T) {
	soft := PutOptions{SoftPin: true, SoftPinTTL: time.Minute}
	t.Run("last", func(t *testing.T) {
		s, c, _, q := semServer(t, ServerOptions{})
		ctx := ctxT(t)
		if err := c.PutWith(ctx, "s", pattern(q, 's'), soft); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"u1", "u2", "u3", "u4"} { // each past the watermark evicts one
			if err := c.Put(ctx, k, pattern(q, k[1])); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.holding("s", "u1", "u2", "u3", "u4"); !slices.Equal(got, []string{"s", "u3", "u4"}) {
			t.Fatalf("held %v: want the soft pin and the newest", got)
		}
		// The unpinned go first, then soft pins, oldest first.
		for _, k := range []string{"s2", "s3", "s4"} {
			if err := c.PutWith(ctx, k, pattern(q, k[1]), soft); err != nil {
				t.Fatal(err)
			}
		}
		if got := s.holding("s", "s2", "s3", "s4", "u3", "u4"); !slices.Equal(got, []string{"s2", "s3", "s4"}) {
			t.Fatalf("held %v", got)
		}
	})
	t.Run("kept", func(t *testing.T) {
		s, c, clk, q := semServer(t, ServerOptions{KeepSoftPinned: true, SoftPinTTL: 30 * time.Second})
		ctx := ctxT(t)
		keys := []string{"s1", "s2", "s3", "s4"}
		for _, k := range keys {
			if err := c.PutWith(ctx, k, pattern(q, k[1]), PutOptions{SoftPin: true}); err != nil {
				t.Fatal(err)
			}
		}
		s.st.mu.Lock()
		until := s.st.m["s1"].pinUntil
		s.st.mu.Unlock()
		if until != 1+int64(30*time.Second) {
			t.Errorf("soft pin until %d: want the server's default TTL", until)
		}
		err := c.Put(ctx, "u", pattern(q, 'u'))
		if !errors.Is(err, ErrFull) {
			t.Fatalf("put into a pool of kept soft pins: %v, want ErrFull", err)
		}
		if got := s.holding(keys...); !slices.Equal(got, keys) {
			t.Fatalf("held %v", got)
		}
		clk.advance(30 * time.Second) // the pins end
		if err := c.Put(ctx, "u", pattern(q, 'u')); err != nil {
			t.Fatalf("put once the soft pins ended: %v", err)
		}
		if got := s.holding(append(keys, "u")...); !slices.Equal(got, []string{"s3", "s4", "u"}) {
			t.Fatalf("held %v", got)
		}
	})
	t.Run("overwrite", func(t *testing.T) {
		// A PUT sets the pin of the value it stores: an overwrite without
		// one unpins.
		s, c, _, q := semServer(t, ServerOptions{})
		ctx := ctxT(t)
		if err := c.PutWith(ctx, "k", pattern(q, 'k'), soft); err != nil {
			t.Fatal(err)
		}
		if err := c.Put(ctx, "k", pattern(q, 'K')); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"u1", "u2", "u3"} {
			if err := c.Put(ctx, k, pattern(q, k[1])); err != nil {
				t.Fatal(err)
			}
		}
		if s.holds("k") {
			t.Fatal("an unpinned overwrite kept the soft pin")
		}
	})
}

// TestHardPin: hard-pinned values are never evicted: a pool full of them
// refuses PUTs with ErrFull until one is deleted.
func TestHardPin(t *testing.T) {
	s, c, _, q := semServer(t, ServerOptions{})
	ctx := ctxT(t)
	hard := PutOptions{HardPin: true}
	if err := c.PutWith(ctx, "h1", pattern(q, '1'), hard); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"u1", "u2", "u3"} {
		if err := c.Put(ctx, k, pattern(q, k[1])); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.holding("h1", "u1", "u2", "u3"); !slices.Equal(got, []string{"h1", "u2", "u3"}) {
		t.Fatalf("held %v: want the hard pin kept", got)
	}
	for _, k := range []string{"h2", "h3", "h4"} {
		if err := c.PutWith(ctx, k, pattern(q, k[1]), hard); err != nil {
			t.Fatal(err)
		}
	}
	hs := []string{"h1", "h2", "h3", "h4"}
	if got := s.holding(hs...); !slices.Equal(got, hs) {
		t.Fatalf("held %v", got)
	}
	for _, small := range []int{q, 1 << 10} {
		err := c.Put(ctx, "u", pattern(small, 'u'))
		if !errors.Is(err, ErrFull) || MooncakeCode(err) != CodeNoAvailableHandle {
			t.Fatalf("put of %d bytes into a pool of hard pins: %v, want ErrFull", small, err)
		}
	}
	if err := c.Delete(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "u", pattern(q, 'u')); err != nil {
		t.Fatalf("put after a delete: %v", err)
	}
	if got := s.holding(hs...); !slices.Equal(got, hs[1:]) {
		t.Fatalf("held %v", got)
	}
}

// TestHighWatermark: a PUT that takes the pool past the high watermark
// evicts, least recently used first, down under it and by at least the
// eviction ratio; at a watermark of 1, and under the reject policy, only a
// PUT that does not fit matters.
func TestHighWatermark(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    ServerOptions
		evicted int // by the fifth eighth
	}{
		{"half", ServerOptions{HighWatermark: 0.5}, 1},
		{"ratio", ServerOptions{HighWatermark: 0.5, EvictionRatio: 0.5}, 3},
		{"off", ServerOptions{HighWatermark: 1}, 0},
		{"reject", ServerOptions{HighWatermark: 0.5, Full: Reject}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c, _, q := semServer(t, tc.opts)
			ctx := ctxT(t)
			eighth := q / 2
			var keys []string
			for i := range 5 {
				k := fmt.Sprint("k", i)
				keys = append(keys, k)
				if err := c.Put(ctx, k, pattern(eighth, byte(i))); err != nil {
					t.Fatal(err)
				}
				if i == 3 && s.Snapshot().Evictions != 0 {
					t.Fatal("evicted at the watermark, not past it")
				}
			}
			if got := s.holding(keys...); !slices.Equal(got, keys[tc.evicted:]) {
				t.Fatalf("held %v: want the %d oldest evicted", got, tc.evicted)
			}
			if st := s.Snapshot(); st.Evictions != uint64(tc.evicted) {
				t.Fatalf("evictions %d, want %d", st.Evictions, tc.evicted)
			}
		})
	}
}

// TestBadSemanticsRefused: options out of range are refused, and a
// refused PUT changes nothing.
func TestBadSemanticsRefused(t *testing.T) {
	for _, o := range []ServerOptions{
		{SoftPinTTL: -time.Second},
		{MaxSoftPinTTL: -time.Second},
		{SoftPinTTL: 2 * time.Hour, MaxSoftPinTTL: time.Hour},
		{HighWatermark: 1.5},
		{HighWatermark: -0.1},
		{EvictionRatio: 2},
	} {
		if s, err := NewServer(context.Background(), o); err == nil {
			s.Close()
			t.Errorf("NewServer(%+v): no error", o)
		}
	}

	s, c, _, _ := semServer(t, ServerOptions{MaxSoftPinTTL: time.Hour})
	ctx := ctxT(t)
	before := s.Snapshot()
	used := s.e.Pool().InUse()
	for _, o := range []PutOptions{
		{SoftPin: true, SoftPinTTL: time.Hour + time.Millisecond}, // past the server's maximum
		{SoftPin: true, SoftPinTTL: -time.Second},
		{SoftPinTTL: time.Second}, // a TTL without a soft pin
		{SoftPin: true, HardPin: true},
	} {
		for _, size := range []int{10, 100 << 10} { // inline, and from a buffer
			err := c.PutWith(ctx, "k", make([]byte, size), o)
			if !errors.Is(err, ErrInvalid) || MooncakeCode(err) != CodeInvalidParams {
				t.Errorf("put with %+v: %v, want ErrInvalid", o, err)
			}
		}
	}
	// What another client could send: refused by the server alike.
	for _, req := range []*kvpb.PutRequest{
		{Pin: kvpb.Pin_PIN_SOFT, SoftPinTtlMs: -1},
		{Pin: kvpb.Pin_PIN_SOFT, SoftPinTtlMs: int64(time.Hour/time.Millisecond) + 1},
		{Pin: kvpb.Pin_PIN_NONE, SoftPinTtlMs: 5},
		{Pin: kvpb.Pin(7)},
		{Replicas: MaxReplicas + 1},
	} {
		req.Key, req.Source = []byte("k"), &kvpb.PutRequest_Value{Value: []byte("v")}
		if _, err := s.Put(ctx, req); !strings.Contains(fmt.Sprint(err), "InvalidArgument") {
			t.Errorf("put %v: %v, want InvalidArgument", req, err)
		}
	}
	if _, err := s.Delete(ctx, &kvpb.DeleteRequest{Key: []byte("k"), Replicas: MaxReplicas + 1}); !strings.Contains(fmt.Sprint(err), "InvalidArgument") {
		t.Errorf("delete with %d replicas: %v", MaxReplicas+1, err)
	}
	after := s.Snapshot()
	if s.holds("k") || after.Keys != before.Keys || after.Evictions != before.Evictions || s.e.Pool().InUse() != used {
		t.Fatalf("refused puts changed the store: %+v, then %+v", before, after)
	}
}

// TestMooncakeCode: each kind of error maps to Mooncake's store code, over
// both request paths.
func TestMooncakeCode(t *testing.T) {
	if !errors.Is(ErrInvalidKey, ErrInvalid) {
		t.Fatal("ErrInvalidKey does not match ErrInvalid")
	}
	s := startServer(t, ServerOptions{Engine: xfer.Config{MemoryMB: 1}, Full: Reject, MaxKey: 16})
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			c := dialMode(t, s.addr, xfer.PolicyTCP, mode)
			ctx := ctxT(t)
			key := "k-" + mode
			if err := c.Put(ctx, key, []byte("v")); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, key); err != nil {
				t.Fatal(err)
			}
			buf, err := c.Engine().Alloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Engine().Free(buf)
			big := "big-" + mode
			if err := c.Put(ctx, big, make([]byte, 100<<10)); err != nil {
				t.Fatal(err)
			}
			_, small := c.GetInto(ctx, big, buf)
			_, notFound := c.Get(ctx, "missing")
			gone, cancel := context.WithCancel(ctx)
			cancel()
			for _, tc := range []struct {
				what string
				err  error
				code int32
			}{
				{"ok", nil, CodeOK},
				{"not found", notFound, CodeObjectNotFound},
				{"leased", c.Delete(ctx, key), CodeObjectHasLease},
				{"full", c.Put(ctx, "f-"+mode, make([]byte, 2<<20-1)), CodeInvalidParams}, // larger than the pool
				{"full", c.Put(ctx, "f-"+mode, make([]byte, 1<<20-100<<10)), CodeNoAvailableHandle},
				{"empty key", c.Put(ctx, "", []byte("v")), CodeInvalidKey},
				{"long key", c.Put(ctx, strings.Repeat("k", 17), []byte("v")), CodeInvalidKey},
				{"long key", c.Delete(ctx, strings.Repeat("k", 17)), CodeInvalidKey},
				{"bad params", c.PutWith(ctx, key, nil, PutOptions{SoftPinTTL: -1}), CodeInvalidParams},
				{"buffer too small", small, CodeBufferOverflow},
				{"canceled", c.Put(gone, key, []byte("v")), CodeRPCFail},
				{"other", errors.New("something else"), CodeInternalError},
			} {
				if got := MooncakeCode(tc.err); got != tc.code {
					t.Errorf("%s: MooncakeCode(%v) = %d, want %d", tc.what, tc.err, got, tc.code)
				}
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, "127.0.0.1:1", ClientOptions{FailFast: true, EngineConfig: xfer.Config{MemoryMB: 1}})
	if MooncakeCode(err) != CodeRPCFail {
		t.Errorf("dial of nothing: MooncakeCode(%v) = %d, want %d", err, MooncakeCode(err), CodeRPCFail)
	}
}

// TestClusterReplicas: with Replicas 2, a PUT stores the value on the
// key's first two servers (distinct, in placement order) and on no other;
// a GET still finds it once the first is closed; a DELETE removes it from
// both, and the lease of a GET refuses it first.
func TestClusterReplicas(t *testing.T) {
	url := "etcd://" + etcdtest.Start(t) + "/replicas"
	ids := []string{"kv-1", "kv-2", "kv-3"}
	servers := map[string]*testServer{}
	for _, id := range ids {
		servers[id] = startServer(t, ServerOptions{Engine: xfer.Config{Directory: url, NodeID: id, DirectoryTTL: 2 * time.Second, MemoryMB: 4}})
		t.Cleanup(func() { servers[id].Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := DialCluster(ctx, ClusterOptions{Directory: url, Replicas: 2, Client: ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, time.Minute, "three servers", func() bool { return slices.Equal(c.Servers(), ids) })

	const n = 30
	first := map[string]string{} // key: its first server
	for i := range n {
		k := fmt.Sprint("r", i)
		if err := c.Put(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
		set := c.replicaSet(k, 2)
		if len(set) != 2 || set[0] == set[1] || set[0].id != c.Owner(k) {
			t.Fatalf("replicas of %s: %v", k, set)
		}
		first[k] = set[0].id
		for _, id := range ids {
			if want := id == set[0].id || id == set[1].id; servers[id].holds(k) != want {
				t.Fatalf("server %s holds %s: %v, want %v", id, k, !want, want)
			}
		}
	}

	// A GET leases the value on the server it read: a DELETE is refused,
	// and nothing is removed.
	if _, err := c.Get(ctx, "r0"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "r0"); !errors.Is(err, ErrHasLease) {
		t.Fatalf("delete of a value just read: %v, want ErrHasLease", err)
	}
	if err := c.DeleteWith(ctx, "r0", DeleteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"r0", "r1"} {
		for _, id := range ids {
			if servers[id].holds(k) {
				t.Fatalf("server %s still holds %s after the delete", id, k)
			}
		}
		if _, err := c.Get(ctx, k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("get %s after the delete: %v", k, err)
		}
	}

	// The first server of r2 closes: every remaining key is still found.
	lost := first["r2"]
	servers[lost].stop()
	servers[lost].Close()
	for i := 2; i < n; i++ {
		k := fmt.Sprint("r", i)
		if v, err := c.Get(ctx, k); err != nil || string(v) != "value of "+k {
			t.Fatalf("get %s (first on %s) with %s closed: %q, %v", k, first[k], lost, v, err)
		}
	}
}

package master_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// clock is the tests' clock: it moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is a Service behind a real gRPC server on loopback TCP, and a
// client of it.
type env struct {
	t   *testing.T
	s   *master.Service
	c   masterpb.MasterClient
	clk *clock
}

// start serves a Service with options o (its clock the test's, no sweeper
// goroutine unless o asks) and dials it.
func start(t *testing.T, o master.Options, secret string) *env {
	t.Helper()
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	o.Now = clk.Now
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = -1
	}
	s := master.New(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := s.NewGRPCServer(secret)
	done := make(chan struct{})
	go func() { defer close(done); g.Serve(l) }()
	c, err := master.Dial(context.Background(), l.Addr().String(), master.DialOptions{Secret: secret, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		g.Stop()
		<-done
		s.Close()
	})
	return &env{t: t, s: s, c: c, clk: clk}
}

var ctx = context.Background()

// id is a client ID of 16 bytes, as Mooncake's.
func id(name string) []byte { return []byte((name + strings.Repeat(".", 16))[:16]) }

func (e *env) mount(client, name string, base, size uint64) int32 {
	e.t.Helper()
	r, err := e.c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: id(client), Segment: &masterpb.Segment{Name: name, Base: base, Size: size}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetCode()
}

func (e *env) unmount(client, name string) int32 {
	e.t.Helper()
	r, err := e.c.UnmountSegment(ctx, &masterpb.UnmountSegmentRequest{ClientId: id(client), Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetCode()
}

func (e *env) putStart(client, key string, size uint64, cfg *masterpb.ReplicateConfig, upsert bool) *masterpb.PutStartResponse {
	e.t.Helper()
	r, err := e.c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id(client), Key: key, Size: size, Config: cfg, Upsert: upsert})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) putEnd(client, key string, token uint64) int32 {
	e.t.Helper()
	r, err := e.c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: id(client), Key: key, Token: token})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetCode()
}

// put puts key whole and returns its replicas.
func (e *env) put(key string, size uint64, cfg *masterpb.ReplicateConfig) []*masterpb.Replica {
	e.t.Helper()
	r := e.putStart("writer", key, size, cfg, false)
	if r.GetCode() != 0 {
		e.t.Fatalf("put start %s: %d %s", key, r.GetCode(), r.GetMessage())
	}
	if c := e.putEnd("writer", key, r.GetToken()); c != 0 {
		e.t.Fatalf("put end %s: %d", key, c)
	}
	return r.GetReplicas()
}

func (e *env) get(key string) *masterpb.ObjectReplicas {
	e.t.Helper()
	r, err := e.c.GetReplicaList(ctx, &masterpb.KeysRequest{Keys: []string{key}})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetObjects()[0]
}

func (e *env) remove(key string, force bool) int32 {
	e.t.Helper()
	r, err := e.c.Remove(ctx, &masterpb.RemoveRequest{Keys: []string{key}, Force: force})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetCodes()[0]
}

func (e *env) exist(keys ...string) []int32 {
	e.t.Helper()
	r, err := e.c.Exist(ctx, &masterpb.KeysRequest{Keys: keys})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.GetCodes()
}

func segments(rs []*masterpb.Replica) []string {
	var s []string
	for _, r := range rs {
		s = append(s, r.GetSegment())
	}
	return s
}

const kib = 1024

// TestMountUnmount mounts segments, again (a no-op), from another client
// (refused), and unmounts one: its objects are gone.
func TestMountUnmount(t *testing.T) {
	e := start(t, master.Options{}, "")
	if c := e.mount("a", "node1:1", 0x10000, 1<<20); c != 0 {
		t.Fatalf("mount: %d", c)
	}
	if c := e.mount("a", "node1:1", 0x10000, 1<<20); c != 0 {
		t.Fatalf("mount again: %d, want 0", c)
	}
	if c := e.mount("b", "node1:1", 0x10000, 1<<20); c != master.CodeSegmentExists {
		t.Fatalf("mount of a live client's segment by another: %d, want %d", c, master.CodeSegmentExists)
	}
	if c := e.mount("a", "node1:1", 0x20000, 1<<20); c != master.CodeInvalidParams {
		t.Fatalf("mount again with another range: %d, want %d", c, master.CodeInvalidParams)
	}
	if st := e.s.Stats(); st.Segments != 1 || st.Capacity != 1<<20 || st.Clients != 1 {
		t.Fatalf("stats after mount: %+v", st)
	}
	rs := e.put("k", 100, nil)
	if len(rs) != 1 || rs[0].GetSegment() != "node1:1" || rs[0].GetAddress() < 0x10000 || rs[0].GetAddress()+100 > 0x10000+1<<20 || rs[0].GetAddress()%64 != 0 {
		t.Fatalf("replicas %v", rs)
	}
	if c := e.unmount("b", "node1:1"); c != master.CodeIllegalClient {
		t.Fatalf("unmount by another client: %d", c)
	}
	if c := e.unmount("a", "node1:1"); c != 0 {
		t.Fatalf("unmount: %d", c)
	}
	if c := e.unmount("a", "node1:1"); c != 0 {
		t.Fatalf("unmount again: %d, want 0 (idempotent)", c)
	}
	if g := e.get("k"); g.GetCode() != master.CodeObjectNotFound {
		t.Fatalf("get after its segment's unmount: %v", g)
	}
	if st := e.s.Stats(); st.Segments != 0 || st.Objects != 0 || st.Capacity != 0 {
		t.Fatalf("stats after unmount: %+v", st)
	}
	if r := e.putStart("a", "k", 10, nil, false); r.GetCode() != master.CodeNoAvailableHandle {
		t.Fatalf("put with no segment: %d", r.GetCode())
	}
}

// TestPutLifecycle walks a put through start, end and revoke, with the
// refusals on the way.
func TestPutLifecycle(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second}, "")
	e.mount("a", "s", 0x100000, 64*kib)
	r := e.putStart("a", "k", 1000, nil, false)
	if r.GetCode() != 0 || len(r.GetReplicas()) != 1 || r.GetToken() == 0 || r.GetReplicas()[0].GetSize() != 1000 {
		t.Fatalf("put start: %v", r)
	}
	if g := e.get("k"); g.GetCode() != master.CodeReplicaNotReady {
		t.Fatalf("get of a key being put: %v", g)
	}
	if c := e.exist("k"); c[0] != 0 {
		t.Fatalf("exist of a key being put: %v", c)
	}
	if c := e.remove("k", true); c != master.CodeReplicaNotReady {
		t.Fatalf("remove of a key being put: %d", c)
	}
	if r2 := e.putStart("b", "k", 1000, nil, false); r2.GetCode() != master.CodeObjectAlreadyExists {
		t.Fatalf("second put start: %v", r2)
	}
	if c := e.putEnd("a", "k", r.GetToken()+1); c != master.CodeInvalidParams {
		t.Fatalf("put end with another token: %d", c)
	}
	if c := e.putEnd("b", "k", r.GetToken()); c != master.CodeIllegalClient {
		t.Fatalf("put end by another client: %d", c)
	}
	if c := e.putEnd("a", "nokey", r.GetToken()); c != master.CodeObjectNotFound {
		t.Fatalf("put end of an unknown key: %d", c)
	}
	if c := e.putEnd("a", "k", r.GetToken()); c != 0 {
		t.Fatalf("put end: %d", c)
	}
	if c := e.putEnd("a", "k", r.GetToken()); c != master.CodeInvalidParams {
		t.Fatalf("put end twice: %d", c)
	}
	g := e.get("k")
	if g.GetCode() != 0 || g.GetSize() != 1000 || g.GetLeaseMs() != 1000 || len(g.GetReplicas()) != 1 ||
		g.GetReplicas()[0].GetAddress() != r.GetReplicas()[0].GetAddress() {
		t.Fatalf("get: %v", g)
	}
	if c := e.exist("k", "other"); c[0] != 1 || c[1] != 0 {
		t.Fatalf("exist: %v", c)
	}
	if r2 := e.putStart("a", "k", 10, nil, false); r2.GetCode() != master.CodeObjectAlreadyExists {
		t.Fatalf("put of a committed key: %v", r2)
	}

	used := e.s.Stats().UsedBytes
	r = e.putStart("a", "gone", 5000, nil, false)
	if e.s.Stats().UsedBytes <= used {
		t.Fatal("put start reserved nothing")
	}
	rv, err := e.c.PutRevoke(ctx, &masterpb.PutEndRequest{ClientId: id("a"), Key: "gone", Token: r.GetToken()})
	if err != nil || rv.GetCode() != 0 {
		t.Fatalf("revoke: %v %v", rv, err)
	}
	if g := e.get("gone"); g.GetCode() != master.CodeObjectNotFound {
		t.Fatalf("get after revoke: %v", g)
	}
	if st := e.s.Stats(); st.UsedBytes != used || st.Objects != 1 || st.PutEnds != 1 {
		t.Fatalf("after revoke: %+v, want %d bytes used", st, used)
	}
}

// TestReplicasDistinctAndPreferred checks that replicas land on distinct
// segments, the preferred ones first and in order, and that a put asking
// for more replicas than segments gets one per segment.
func TestReplicasDistinctAndPreferred(t *testing.T) {
	e := start(t, master.Options{}, "")
	for i, n := range []string{"s0", "s1", "s2", "s3"} {
		if c := e.mount("a", n, uint64(i+1)<<30, 1<<20); c != 0 {
			t.Fatal(c)
		}
	}
	for i := range 20 {
		rs := e.put("k"+string(rune('a'+i)), 4*kib, &masterpb.ReplicateConfig{ReplicaNum: 3})
		seen := map[string]bool{}
		for _, s := range segments(rs) {
			seen[s] = true
		}
		if len(rs) != 3 || len(seen) != 3 {
			t.Fatalf("3 replicas: %v", segments(rs))
		}
	}
	rs := e.put("pref", kib, &masterpb.ReplicateConfig{ReplicaNum: 2, PreferredSegments: []string{"nosuch", "s2", "s0"}})
	if got := strings.Join(segments(rs), ","); got != "s2,s0" {
		t.Fatalf("preferred segments: %s, want s2,s0", got)
	}
	rs = e.put("many", kib, &masterpb.ReplicateConfig{ReplicaNum: 6})
	if len(rs) != 4 {
		t.Fatalf("6 replicas over 4 segments: %v", segments(rs))
	}
	if g := e.get("many"); len(g.GetReplicas()) != 4 {
		t.Fatalf("get: %v", g)
	}
	if st := e.s.Stats(); st.Evictions != 0 || st.Objects != 22 {
		t.Fatalf("fewer segments than replicas evicted objects: %+v", st)
	}
}

// TestLeaseBlocksRemove reads an object (a lease) and removes it: refused
// until the lease ends, by the test's clock, unless forced.
func TestLeaseBlocksRemove(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second}, "")
	e.mount("a", "s", 0, 1<<20)
	e.put("k", kib, nil)
	if c := e.remove("k", false); c != 0 {
		t.Fatalf("remove with no read lease (PutEnd's lasts 0): %d", c)
	}
	e.put("k", kib, nil)
	e.get("k")
	if c := e.remove("k", false); c != master.CodeObjectHasLease {
		t.Fatalf("remove while leased: %d", c)
	}
	e.clk.Add(999 * time.Millisecond)
	e.exist("k") // extends the lease by another second
	e.clk.Add(999 * time.Millisecond)
	if c := e.remove("k", false); c != master.CodeObjectHasLease {
		t.Fatalf("remove within the lease Exist extended: %d", c)
	}
	e.clk.Add(2 * time.Millisecond)
	if c := e.remove("k", false); c != 0 {
		t.Fatalf("remove after the lease: %d", c)
	}
	if c := e.remove("k", false); c != master.CodeObjectNotFound {
		t.Fatalf("remove again: %d", c)
	}
	e.put("k", kib, nil)
	e.get("k")
	if c := e.remove("k", true); c != 0 {
		t.Fatalf("forced remove while leased: %d", c)
	}
	// Its places stay held while the lease it broke lasts.
	if st := e.s.Stats(); st.Objects != 0 || st.UsedBytes != kib || st.LeaseRefusals != 2 {
		t.Fatalf("stats: %+v", st)
	}
	e.clk.Add(time.Second)
	e.s.Sweep()
	if st := e.s.Stats(); st.UsedBytes != 0 {
		t.Fatalf("stats once the lease ended: %+v", st)
	}
}

// TestRemoveByRegexAndAll removes by pattern and all at once, leased keys
// kept unless forced.
func TestRemoveByRegexAndAll(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second}, "")
	e.mount("a", "s", 0, 1<<20)
	for _, k := range []string{"a/1", "a/2", "b/1", "b/2", "ca/3"} {
		e.put(k, kib, nil)
	}
	e.putStart("writer", "a/pending", kib, nil, false)
	e.get("a/2")
	byRegex := func(p string, force bool) *masterpb.CountResponse {
		r, err := e.c.RemoveByRegex(ctx, &masterpb.RemoveByRegexRequest{Pattern: p, Force: force})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := byRegex("(", false); r.GetCount() != master.CodeInvalidParams || r.GetMessage() == "" {
		t.Fatalf("bad pattern: %v", r)
	}
	if r := byRegex(`^a/`, false); r.GetCount() != 1 {
		t.Fatalf("^a/: %v, want 1 (a/2 leased, a/pending being put)", r)
	}
	if r := byRegex(`^a/`, true); r.GetCount() != 1 {
		t.Fatalf("^a/ forced: %v", r)
	}
	if c := e.exist("a/1", "a/2", "ca/3"); c[0] != 0 || c[1] != 0 || c[2] != 1 {
		t.Fatalf("exist after regex removal: %v", c)
	}
	e.get("b/1")
	all := func(force bool) int64 {
		r, err := e.c.RemoveAll(ctx, &masterpb.RemoveAllRequest{Force: force})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetCount()
	}
	if n := all(false); n != 1 {
		t.Fatalf("remove all: %d, want 1 (b/2; Exist leased ca/3)", n)
	}
	if n := all(true); n != 2 {
		t.Fatalf("remove all forced: %d, want 2 (b/1, ca/3)", n)
	}
	if st := e.s.Stats(); st.Objects != 1 {
		t.Fatalf("the put in progress should stay: %+v", st)
	}
}

// TestUpsertKeepsOldPlaces replaces a leased object's value: readers keep
// seeing the old places until PutEnd, and the old places are not handed
// out again until the lease ends.
func TestUpsertKeepsOldPlaces(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second}, "")
	e.mount("a", "s", 0x100000, 8*kib)
	old := e.put("k", kib, nil)[0].GetAddress()
	e.get("k") // a reader holds a lease
	r := e.putStart("a", "k", 2*kib, nil, true)
	if r.GetCode() != 0 {
		t.Fatalf("upsert start: %v", r)
	}
	if r2 := e.putStart("b", "k", kib, nil, true); r2.GetCode() != master.CodeObjectAlreadyExists {
		t.Fatalf("second upsert while one is in progress: %v", r2)
	}
	if g := e.get("k"); g.GetCode() != 0 || g.GetSize() != kib || g.GetReplicas()[0].GetAddress() != old {
		t.Fatalf("get during the upsert: %v, want the old value", g)
	}
	if c := e.remove("k", true); c != master.CodeReplicaNotReady {
		t.Fatalf("remove during the upsert: %d", c)
	}
	if c := e.putEnd("a", "k", r.GetToken()); c != 0 {
		t.Fatalf("upsert end: %d", c)
	}
	g := e.get("k")
	if g.GetSize() != 2*kib || g.GetReplicas()[0].GetAddress() != r.GetReplicas()[0].GetAddress() {
		t.Fatalf("get after the upsert: %v", g)
	}
	if used := e.s.Stats().UsedBytes; used != 3*kib {
		t.Fatalf("used %d, want 3 KiB: the old place is held while the lease lasts", used)
	}
	// The free space is 5 KiB, but not the old place: a 5 KiB put fits
	// only once it is released.
	if rs := e.put("other", kib, nil); rs[0].GetAddress() == old {
		t.Fatal("the old place was handed out while a reader's lease lasted")
	}
	e.clk.Add(time.Second + time.Millisecond)
	e.s.Sweep()
	if used := e.s.Stats().UsedBytes; used != 3*kib {
		t.Fatalf("used %d after the lease, want 3 KiB (k and other)", used)
	}
	if r := e.putStart("c", "fresh", kib, nil, true); r.GetCode() != 0 {
		t.Fatalf("upsert of a new key: %v", r)
	}
}

// TestPutStartDiscard lets a put go stale: another PutStart of its key is
// refused until the discard timeout, then discards it; its places stay
// held until the release timeout.
func TestPutStartDiscard(t *testing.T) {
	e := start(t, master.Options{PutStartDiscard: 30 * time.Second, PutStartRelease: time.Minute, ClientTTL: time.Hour}, "")
	e.mount("a", "s", 0, 1<<20)
	r := e.putStart("a", "k", kib, nil, false)
	e.clk.Add(29 * time.Second)
	if r2 := e.putStart("b", "k", kib, nil, false); r2.GetCode() != master.CodeObjectAlreadyExists {
		t.Fatalf("put start within the discard timeout: %v", r2)
	}
	e.clk.Add(2 * time.Second)
	r2 := e.putStart("b", "k", kib, nil, false)
	if r2.GetCode() != 0 || r2.GetReplicas()[0].GetAddress() == r.GetReplicas()[0].GetAddress() {
		t.Fatalf("put start after the discard timeout: %v", r2)
	}
	if c := e.putEnd("a", "k", r.GetToken()); c != master.CodeInvalidParams {
		t.Fatalf("put end of the discarded put: %d", c)
	}
	if used := e.s.Stats().UsedBytes; used != 2*kib {
		t.Fatalf("used %d: the discarded put's place should stay held", used)
	}
	e.clk.Add(30 * time.Second)
	e.s.Sweep()
	if used := e.s.Stats().UsedBytes; used != kib {
		t.Fatalf("used %d after the release timeout", used)
	}
}

// TestEviction fills a segment past the watermark: the put that passes it
// evicts the least recently used objects, never leased or hard-pinned
// ones, and soft-pinned ones only after every other.
func TestEviction(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second, EvictionRatio: 0.5, EvictionHighWatermark: 0.9}, "")
	e.mount("a", "s", 0x100000, 10*kib)
	e.put("k0", kib, &masterpb.ReplicateConfig{HardPin: true})
	e.put("k1", kib, &masterpb.ReplicateConfig{SoftPin: true})
	for _, k := range []string{"k2", "k3", "k4", "k5", "k6", "k7", "k8"} {
		e.put(k, kib, nil)
	}
	e.get("k3") // k3 is the most recently used...
	e.clk.Add(2 * time.Second)
	e.get("k2") // ...but for k2, which holds a lease
	// 10 of 10 KiB: past the watermark; half the used bytes go.
	e.put("k9", kib, nil)
	want := map[string]int32{"k0": 1, "k1": 1, "k2": 1, "k3": 1, "k4": 0, "k5": 0, "k6": 0, "k7": 0, "k8": 0, "k9": 1}
	for k, w := range want {
		if c := e.exist(k); c[0] != w {
			t.Errorf("after the first eviction: exist %s = %d, want %d", k, c[0], w)
		}
	}
	// Exist leased what it found: let those leases end, but k2's.
	e.clk.Add(2 * time.Second)
	e.get("k2")
	// 6 KiB finds 5 free: the plain k3 and k9 go, then the soft-pinned k1.
	e.put("big", 6*kib, nil)
	for k, w := range map[string]int32{"k0": 1, "k1": 0, "k2": 1, "k3": 0, "k9": 0, "big": 1} {
		if c := e.exist(k); c[0] != w {
			t.Errorf("after the second eviction: exist %s = %d, want %d", k, c[0], w)
		}
	}
	if st := e.s.Stats(); st.Evictions != 8 {
		t.Fatalf("evictions %d, want 8", st.Evictions)
	}
	// Leased and hard-pinned objects are never evicted: no room.
	e.get("big")
	if r := e.putStart("a", "huge", 3*kib, nil, false); r.GetCode() != master.CodeNoAvailableHandle {
		t.Fatalf("put with only leased and pinned objects: %v", r)
	}
}

// TestEvictionSoftPinnedLast fills a segment with a soft-pinned object,
// the oldest, and plain ones: puts that find no room evict the plain ones,
// least recently used first, and the soft-pinned one only when nothing
// else is left.
func TestEvictionSoftPinnedLast(t *testing.T) {
	e := start(t, master.Options{EvictionRatio: 0.01, EvictionHighWatermark: 1}, "")
	e.mount("a", "s", 0, 4*kib)
	e.put("soft", kib, &masterpb.ReplicateConfig{SoftPin: true})
	for _, k := range []string{"p1", "p2", "p3"} {
		e.put(k, kib, nil)
	}
	// Exist touches the keys it finds in the order it is given them.
	exists := func(keys string, want ...int32) {
		t.Helper()
		if got := e.exist(strings.Fields(keys)...); !slices.Equal(got, want) {
			t.Errorf("exist %s = %v, want %v", keys, got, want)
		}
		e.clk.Add(11 * time.Second) // past the leases Exist granted
	}
	e.put("n1", kib, nil) // evicts p1, the oldest plain object
	exists("soft p1 p2 p3", 1, 0, 1, 1)
	e.put("n2", 2*kib, nil) // evicts n1 and p2, neighbours
	exists("soft n1 p2 p3", 1, 0, 0, 1)
	e.put("n3", 2*kib, nil) // evicts n2, which is enough
	exists("soft n2 p3 n3", 1, 0, 1, 1)
	e.put("n4", 4*kib, nil) // evicts p3, n3, and last the soft-pinned one
	exists("soft p3 n3 n4", 0, 0, 0, 1)
}

// TestEvictionSparesSoftPinned: with NoEvictSoftPinned, a soft-pinned
// object stays while its pin lasts, and goes once it ended.
func TestEvictionSparesSoftPinned(t *testing.T) {
	e := start(t, master.Options{NoEvictSoftPinned: true, SoftPinTTL: time.Minute}, "")
	e.mount("a", "s", 0, 2*kib)
	e.put("soft", 2*kib, &masterpb.ReplicateConfig{SoftPin: true})
	if r := e.putStart("a", "k", kib, nil, false); r.GetCode() != master.CodeNoAvailableHandle {
		t.Fatalf("put over a soft-pinned object: %v", r)
	}
	e.clk.Add(time.Minute)
	if r := e.putStart("a", "k", kib, nil, false); r.GetCode() != 0 {
		t.Fatalf("put once the soft pin ended: %v", r)
	}
	if c := e.exist("soft"); c[0] != 0 {
		t.Fatal("the object whose soft pin ended was not evicted")
	}
}

// TestDeadClient lets a client go quiet for the client TTL: its segments
// are unmounted, objects only on them are gone, replicas elsewhere stay;
// its next ping says remount.
func TestDeadClient(t *testing.T) {
	e := start(t, master.Options{ClientTTL: 10 * time.Second}, "")
	e.mount("a", "sa", 0x100000, 1<<20)
	e.mount("b", "sb", 0x100000, 1<<20)
	e.put("both", kib, &masterpb.ReplicateConfig{ReplicaNum: 2})
	e.put("ona", kib, &masterpb.ReplicateConfig{PreferredSegments: []string{"sa"}})
	e.put("onb", kib, &masterpb.ReplicateConfig{PreferredSegments: []string{"sb"}})
	ping := func(client string) *masterpb.PingResponse {
		r, err := e.c.Ping(ctx, &masterpb.PingRequest{ClientId: id(client)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ping("b"); r.GetRemount() || r.GetClientTtlMs() != 10000 {
		t.Fatalf("ping of a known client: %v", r)
	}
	e.clk.Add(6 * time.Second)
	ping("b")
	e.clk.Add(6 * time.Second)
	e.s.Sweep()
	if g := e.get("ona"); g.GetCode() != master.CodeObjectNotFound {
		t.Fatalf("object on the dead client's segment: %v", g)
	}
	if g := e.get("both"); g.GetCode() != 0 || strings.Join(segments(g.GetReplicas()), ",") != "sb" {
		t.Fatalf("object with a replica on a live segment: %v", g)
	}
	if g := e.get("onb"); g.GetCode() != 0 {
		t.Fatalf("object on the live client's segment: %v", g)
	}
	if st := e.s.Stats(); st.Segments != 1 || st.Clients != 1 || st.DeadClients != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if r := ping("a"); !r.GetRemount() {
		t.Fatal("the dead client was not told to remount")
	}
	if c := e.mount("a", "sa", 0x100000, 1<<20); c != 0 {
		t.Fatalf("remount: %d", c)
	}
	if r := ping("a"); r.GetRemount() {
		t.Fatal("remount asked again after remounting")
	}
	// A quiet client's segment name is free for another, even before the
	// sweep.
	e.clk.Add(11 * time.Second)
	ping("b")
	if c := e.mount("b", "sa", 0x200000, 1<<20); c != 0 {
		t.Fatalf("mount of a dead client's segment name: %d", c)
	}
}

// TestBadInputRefused sends malformed calls: each is refused with its
// code, and nothing changes.
func TestBadInputRefused(t *testing.T) {
	e := start(t, master.Options{MaxSoftPinTTL: time.Hour}, "")
	e.mount("a", "s", 0, 1<<20)
	long := strings.Repeat("k", master.MaxKeyLen+1)
	for _, c := range []struct {
		name string
		r    *masterpb.PutStartRequest
		code int32
	}{
		{"no client", &masterpb.PutStartRequest{Key: "k", Size: 1}, master.CodeInvalidParams},
		{"client id too long", &masterpb.PutStartRequest{ClientId: make([]byte, 65), Key: "k", Size: 1}, master.CodeInvalidParams},
		{"empty key", &masterpb.PutStartRequest{ClientId: id("a"), Size: 1}, master.CodeInvalidParams},
		{"key too long", &masterpb.PutStartRequest{ClientId: id("a"), Key: long, Size: 1}, master.CodeInvalidKey},
		{"size 0", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k"}, master.CodeInvalidParams},
		{"17 replicas", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k", Size: 1, Config: &masterpb.ReplicateConfig{ReplicaNum: 17}}, master.CodeInvalidParams},
		{"soft pin TTL past the max", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k", Size: 1, Config: &masterpb.ReplicateConfig{SoftPin: true, SoftPinTtlMs: 3_600_001}}, master.CodeInvalidParams},
		{"soft pin TTL without soft pin", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k", Size: 1, Config: &masterpb.ReplicateConfig{SoftPinTtlMs: 1}}, master.CodeInvalidParams},
		{"empty preferred segment", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k", Size: 1, Config: &masterpb.ReplicateConfig{PreferredSegments: []string{""}}}, master.CodeInvalidParams},
		{"larger than any segment", &masterpb.PutStartRequest{ClientId: id("a"), Key: "k", Size: 1 << 40}, master.CodeNoAvailableHandle},
	} {
		r, err := e.c.PutStart(ctx, c.r)
		if err != nil || r.GetCode() != c.code || r.GetMessage() == "" {
			t.Errorf("%s: %v %v, want code %d", c.name, r, err, c.code)
		}
	}
	for _, c := range []struct {
		name string
		r    *masterpb.MountSegmentRequest
	}{
		{"no client", &masterpb.MountSegmentRequest{Segment: &masterpb.Segment{Name: "x", Size: 1 << 20}}},
		{"no segment", &masterpb.MountSegmentRequest{ClientId: id("a")}},
		{"no name", &masterpb.MountSegmentRequest{ClientId: id("a"), Segment: &masterpb.Segment{Size: 1 << 20}}},
		{"size 0", &masterpb.MountSegmentRequest{ClientId: id("a"), Segment: &masterpb.Segment{Name: "x"}}},
		{"overflows", &masterpb.MountSegmentRequest{ClientId: id("a"), Segment: &masterpb.Segment{Name: "x", Base: ^uint64(0) - 10, Size: 100}}},
		{"no aligned line", &masterpb.MountSegmentRequest{ClientId: id("a"), Segment: &masterpb.Segment{Name: "x", Base: 1, Size: 100}}},
	} {
		r, err := e.c.MountSegment(ctx, c.r)
		if err != nil || r.GetCode() != master.CodeInvalidParams {
			t.Errorf("mount, %s: %v %v", c.name, r, err)
		}
	}
	if g := e.get(long); g.GetCode() != master.CodeInvalidKey {
		t.Errorf("get of a key too long: %v", g)
	}
	if c := e.exist(""); c[0] != master.CodeInvalidParams {
		t.Errorf("exist of the empty key: %v", c)
	}
	if c := e.remove(long, true); c != master.CodeInvalidKey {
		t.Errorf("remove of a key too long: %d", c)
	}
	if r, _ := e.c.RemoveByRegex(ctx, &masterpb.RemoveByRegexRequest{Pattern: strings.Repeat("a", master.MaxPatternLen+1)}); r.GetCount() != master.CodeInvalidParams {
		t.Errorf("pattern too long: %v", r)
	}
	if r, _ := e.c.Ping(ctx, &masterpb.PingRequest{}); r.GetCode() != master.CodeInvalidParams {
		t.Errorf("ping without a client: %v", r)
	}
	if st := e.s.Stats(); st.Objects != 0 || st.UsedBytes != 0 || st.Segments != 1 || st.Clients != 1 {
		t.Fatalf("refused calls changed the state: %+v", st)
	}
}

// TestUpsertKeepsSoftPin: an upsert with keep_soft_pin (PRESERVE) keeps
// the object's soft pin; one without drops it; keep_soft_pin with a new
// soft pin is refused, with nothing changed.
func TestUpsertKeepsSoftPin(t *testing.T) {
	e := start(t, master.Options{NoEvictSoftPinned: true, SoftPinTTL: time.Minute}, "")
	e.mount("a", "s", 0, 2*kib)
	e.put("soft", kib, &masterpb.ReplicateConfig{SoftPin: true})
	if r := e.putStart("a", "soft", kib, &masterpb.ReplicateConfig{KeepSoftPin: true, SoftPin: true}, true); r.GetCode() != master.CodeInvalidParams {
		t.Fatalf("keep_soft_pin with soft_pin: %v", r)
	}
	r := e.putStart("a", "soft", kib, &masterpb.ReplicateConfig{KeepSoftPin: true}, true)
	if r.GetCode() != 0 || e.putEnd("a", "soft", r.GetToken()) != 0 {
		t.Fatalf("upsert keeping the soft pin: %v", r)
	}
	// Still pinned: a put that needs its room finds none.
	if r := e.putStart("a", "k", 2*kib, nil, false); r.GetCode() != master.CodeNoAvailableHandle {
		t.Fatalf("put over the kept soft pin: %v", r)
	}
	r = e.putStart("a", "soft", kib, nil, true)
	if r.GetCode() != 0 || e.putEnd("a", "soft", r.GetToken()) != 0 {
		t.Fatalf("upsert dropping the soft pin: %v", r)
	}
	if r := e.putStart("a", "k", 2*kib, nil, false); r.GetCode() != 0 {
		t.Fatalf("put once the soft pin was dropped: %v", r)
	}
}

// TestForceRemoveHoldsPlaces: a forced removal of a leased object frees
// its places only once the lease ends, so that a reader within its lease
// never finds another object's bytes there.
func TestForceRemoveHoldsPlaces(t *testing.T) {
	e := start(t, master.Options{LeaseTTL: time.Second}, "")
	e.mount("a", "s", 0, kib)
	e.put("k", kib, nil)
	if o := e.get("k"); o.GetCode() != 0 {
		t.Fatalf("get: %v", o)
	}
	if c := e.remove("k", true); c != 0 {
		t.Fatalf("forced removal: %d", c)
	}
	if r := e.putStart("a", "k2", kib, nil, false); r.GetCode() != master.CodeNoAvailableHandle {
		t.Fatalf("a put into the leased places: %v", r)
	}
	e.clk.Add(time.Second)
	if r := e.putStart("a", "k2", kib, nil, false); r.GetCode() != 0 {
		t.Fatalf("a put once the lease ended: %v", r)
	}
}

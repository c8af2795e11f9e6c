package master_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// haTTL is the tests' election lease: etcd's shortest with its default
// heartbeat (1.5 s, rounded up).
const haTTL = 2 * time.Second

// candidate is a Service behind a real gRPC server on loopback TCP, a
// candidate of an etcd's election.
type candidate struct {
	s    *master.Service
	h    *master.HA
	g    *grpc.Server
	addr string
	done chan struct{}
}

// stop stops the gRPC server at once and ends the candidacy. Idempotent.
func (c *candidate) stop() {
	c.g.Stop()
	<-c.done
	c.h.Close()
	c.s.Close()
}

func startCandidate(t *testing.T, etcd, cluster string, ho master.HAOptions) *candidate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := master.New(master.Options{Logger: slog.New(slog.DiscardHandler)})
	ho.Endpoints, ho.Cluster, ho.Addr = []string{etcd}, cluster, l.Addr().String()
	if ho.LeaseTTL == 0 {
		ho.LeaseTTL = haTTL
	}
	if ho.FlushInterval == 0 {
		ho.FlushInterval = 20 * time.Millisecond
	}
	h, err := master.StartHA(context.Background(), s, ho)
	if err != nil {
		t.Fatal(err)
	}
	c := &candidate{s: s, h: h, g: s.NewGRPCServer(""), addr: ho.Addr, done: make(chan struct{})}
	go func() { defer close(c.done); c.g.Serve(l) }()
	t.Cleanup(c.stop)
	return c
}

func etcdClient(t *testing.T, host string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitLeader waits until one of cs leads, and returns it.
func waitLeader(t *testing.T, within time.Duration, cs ...*candidate) *candidate {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, c := range cs {
			if c.h.Leading() {
				return c
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no candidate leads within %v", within)
	return nil
}

// revokeLeader revokes the lease of the leader's election key: its
// session ends as when it dies and its lease expires.
func revokeLeader(t *testing.T, cli *clientv3.Client, cluster string) {
	t.Helper()
	r, err := cli.Get(ctx, master.Prefix(cluster)+"leader/", clientv3.WithFirstCreate()...)
	if err != nil || len(r.Kvs) == 0 {
		t.Fatalf("the leader's key: %v %v", r, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

// waitKeys waits until etcd holds n keys under prefix.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && r.Count == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v keys (%v), want %d", prefix, r, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dial(t *testing.T, addr string) *master.Client {
	t.Helper()
	c, err := master.Dial(ctx, addr, master.DialOptions{OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func putObject(t *testing.T, c masterpb.MasterClient, client []byte, key string, size uint64, replicas uint32) []*masterpb.Replica {
	t.Helper()
	ps, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: client, Key: key, Size: size, Config: &masterpb.ReplicateConfig{ReplicaNum: replicas}})
	if err != nil || ps.GetCode() != 0 {
		t.Fatalf("put start %s: %v %v", key, ps, err)
	}
	if r, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: client, Key: key, Token: ps.GetToken()}); err != nil || r.GetCode() != 0 {
		t.Fatalf("put end %s: %v %v", key, r, err)
	}
	return ps.GetReplicas()
}

func mount(t *testing.T, c masterpb.MasterClient, client []byte, name string, base, size uint64) {
	t.Helper()
	r, err := c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: client, Segment: &masterpb.Segment{Name: name, Base: base, Size: size}})
	if err != nil || r.GetCode() != 0 {
		t.Fatalf("mount %s: %v %v", name, r, err)
	}
}

// TestHALeaderStandbyFailover runs two candidates: the leader serves, the
// standby refuses naming it; the leader's session ends (its lease
// revoked), and the standby leads within twice the TTL with the objects
// and their places, refuses nothing it should serve, and never hands a
// loaded place out again; the deposed leader refuses calls.
func TestHALeaderStandbyFailover(t *testing.T) {
	host := etcdtest.Start(t)
	cli := etcdClient(t, host)
	a := startCandidate(t, host, t.Name(), master.HAOptions{})
	b := startCandidate(t, host, t.Name(), master.HAOptions{})
	leader := waitLeader(t, 10*time.Second, a, b)
	standby := b
	if leader == b {
		standby = a
	}
	lc, sc := dial(t, leader.addr), dial(t, standby.addr)

	// The standby refuses, naming the leader once it saw it elected.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := sc.Ping(ctx, &masterpb.PingRequest{ClientId: id("x")})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("a standby's ping: %v, want codes.Unavailable", err)
		}
		if strings.Contains(err.Error(), "the leader is at "+leader.addr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's refusal %q names no leader %s", err, leader.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}

	const segSize = 64 * 64
	mount(t, lc, id("c1"), "seg1", 1<<20, segSize)
	mount(t, lc, id("c2"), "seg2", 2<<20, segSize)
	places := map[string][]*masterpb.Replica{}
	for i := range 8 {
		key := fmt.Sprintf("k%d", i)
		places[key] = putObject(t, lc, id("c1"), key, 100, 2) // 2 lines on each segment
	}
	if r, err := lc.Remove(ctx, &masterpb.RemoveRequest{Keys: []string{"k7"}, Force: true}); err != nil || r.GetCodes()[0] != 0 {
		t.Fatalf("remove: %v %v", r, err)
	}
	delete(places, "k7")
	waitKeys(t, cli, master.Prefix(t.Name())+"objects/", 7)
	waitKeys(t, cli, master.Prefix(t.Name())+"segments/", 2)

	start := time.Now()
	revokeLeader(t, cli, t.Name())
	waitLeader(t, 2*haTTL, standby)
	t.Logf("the standby leads %v after the leader's session ended", time.Since(start).Round(time.Millisecond))
	if _, err := lc.Ping(ctx, &masterpb.PingRequest{ClientId: id("c1")}); status.Code(err) != codes.Unavailable {
		t.Fatalf("the deposed leader's ping: %v, want codes.Unavailable", err)
	}

	// The objects and their places survive; the clients are known.
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	g, err := sc.GetReplicaList(ctx, &masterpb.KeysRequest{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range g.GetObjects() {
		want := places[keys[i]]
		if want == nil {
			if o.GetCode() != master.CodeObjectNotFound {
				t.Errorf("%s: %v, want it removed", keys[i], o)
			}
			continue
		}
		if o.GetCode() != 0 || o.GetSize() != 100 || len(o.GetReplicas()) != len(want) {
			t.Fatalf("%s after the failover: %v", keys[i], o)
		}
		for j, r := range o.GetReplicas() {
			if r.GetSegment() != want[j].GetSegment() || r.GetAddress() != want[j].GetAddress() {
				t.Errorf("%s replica %d: %v, want %v", keys[i], j, r, want[j])
			}
		}
	}
	if p, err := sc.Ping(ctx, &masterpb.PingRequest{ClientId: id("c1")}); err != nil || p.GetRemount() {
		t.Fatalf("a loaded client's ping: %v %v, want no remount", p, err)
	}
	// Fill the segments: no new place overlaps a loaded one.
	for i := 0; ; i++ {
		ps, err := sc.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id("c2"), Key: fmt.Sprintf("new%d", i), Size: 64,
			Config: &masterpb.ReplicateConfig{ReplicaNum: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if ps.GetCode() != 0 {
			break
		}
		r := ps.GetReplicas()[0]
		for k, rs := range places {
			for _, old := range rs {
				if old.GetSegment() == r.GetSegment() && r.GetAddress() < old.GetAddress()+128 && old.GetAddress() < r.GetAddress()+64 {
					t.Fatalf("new place %v overlaps %s's %v", r, k, old)
				}
			}
		}
		if i > 2*segSize/64 {
			t.Fatal("the segments never filled")
		}
	}
}

// TestHAWriteBehindBatching puts many objects with long keys through a
// leader whose interval never ends: the change count makes it write, in
// far fewer transactions than puts, each under etcd's request limit.
func TestHAWriteBehindBatching(t *testing.T) {
	host := etcdtest.Start(t)
	cli := etcdClient(t, host)
	const n = 599 // and the mount: 600 changes, 3 rounds of 200
	a := startCandidate(t, host, t.Name(), master.HAOptions{FlushInterval: time.Hour, FlushChanges: 200})
	waitLeader(t, 10*time.Second, a)
	c := dial(t, a.addr)
	mount(t, c, id("c1"), "seg", 1<<20, 1<<30)
	r0, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		putObject(t, c, id("c1"), fmt.Sprintf("%04d%s", i, strings.Repeat("k", 4000)), 4096, 1)
	}
	// 599 puts of 4 KiB keys: 2.4 MB of keys, more than one request may
	// carry; 3 rounds of 200 changes, each split in transactions.
	waitKeys(t, cli, master.Prefix(t.Name())+"objects/", n)
	waitKeys(t, cli, master.Prefix(t.Name())+"segments/", 1)
	r1, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	txns := r1.Header.Revision - r0.Header.Revision
	t.Logf("%d puts written in %d transactions", n, txns)
	if txns > n/20 {
		t.Fatalf("%d puts took %d etcd revisions: want them batched", n, txns)
	}
}

// TestDialLeaderFollows dials the leader through etcd, loses it (its
// server stops, its session ends), and finds the calls reach the new
// leader within twice the TTL, the segment mounted again by OnLeader.
func TestDialLeaderFollows(t *testing.T) {
	host := etcdtest.Start(t)
	cli := etcdClient(t, host)
	a := startCandidate(t, host, t.Name(), master.HAOptions{})
	b := startCandidate(t, host, t.Name(), master.HAOptions{})
	leader := waitLeader(t, 10*time.Second, a, b)
	standby := b
	if leader == b {
		standby = a
	}
	switched := make(chan string, 4)
	lc, err := master.DialLeader(ctx, []string{host}, master.LeaderOptions{Cluster: t.Name(),
		DialOptions: master.DialOptions{OpTimeout: 2 * time.Second}, Logger: slog.New(slog.DiscardHandler),
		OnLeader: func(addr string) { switched <- addr }})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if lc.Leader() != leader.addr {
		t.Fatalf("DialLeader follows %s, want the leader %s", lc.Leader(), leader.addr)
	}
	mount(t, lc, id("c1"), "seg", 1<<20, 1<<20)
	putObject(t, lc, id("c1"), "k", 1000, 1)
	waitKeys(t, cli, master.Prefix(t.Name())+"objects/", 1)

	start := time.Now()
	leader.g.Stop()
	revokeLeader(t, cli, t.Name())
	for {
		_, err := lc.Ping(ctx, &masterpb.PingRequest{ClientId: id("c1")})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a ping during the failover: %v", err)
		}
		if time.Since(start) > 2*haTTL {
			t.Fatalf("no ping reached a leader within %v: %v", 2*haTTL, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the client reached the new leader %v after the old one died", time.Since(start).Round(time.Millisecond))
	select {
	case addr := <-switched:
		if addr != standby.addr {
			t.Fatalf("OnLeader(%s), want the standby %s", addr, standby.addr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLeader was not called")
	}
	g, err := lc.GetReplicaList(ctx, &masterpb.KeysRequest{Keys: []string{"k"}})
	if err != nil || g.GetObjects()[0].GetCode() != 0 {
		t.Fatalf("get after the failover: %v %v", g, err)
	}
	mount(t, lc, id("c1"), "seg", 1<<20, 1<<20) // a no-op on the loaded segment
	putObject(t, lc, id("c1"), "k2", 1000, 1)
}

// TestHALeaderLosesEtcd stops the etcd under a lone leader: it stops
// serving within the lease TTL (it cannot know it still leads); once etcd
// is back it is elected again and serves the state it wrote.
func TestHALeaderLosesEtcd(t *testing.T) {
	e := etcdtest.StartRestartable(t)
	a := startCandidate(t, e.Host, t.Name(), master.HAOptions{})
	waitLeader(t, 10*time.Second, a)
	c := dial(t, a.addr)
	mount(t, c, id("c1"), "seg", 1<<20, 1<<20)
	want := putObject(t, c, id("c1"), "k", 1000, 1)
	waitKeys(t, etcdClient(t, e.Host), master.Prefix(t.Name())+"objects/", 1)

	e.Stop()
	start := time.Now()
	for a.h.Leading() {
		if time.Since(start) > haTTL+100*time.Millisecond {
			t.Fatalf("still leads %v after etcd stopped", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("stopped serving %v after etcd stopped", time.Since(start).Round(time.Millisecond))
	if _, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: id("c1")}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a ping without etcd: %v, want codes.Unavailable", err)
	}
	e.Start()
	waitLeader(t, 30*time.Second, a)
	g, err := c.GetReplicaList(ctx, &masterpb.KeysRequest{Keys: []string{"k"}})
	if err != nil || g.GetObjects()[0].GetCode() != 0 || g.GetObjects()[0].GetReplicas()[0].GetAddress() != want[0].GetAddress() {
		t.Fatalf("get after etcd came back: %v %v, want %v", g, err, want)
	}
}

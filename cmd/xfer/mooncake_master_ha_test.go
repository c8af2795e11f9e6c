package main

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// TestMooncakeMasterHA runs two `xfer mooncake master --directory
// etcd://...` processes on an etcd: a client that follows the leader
// (DialLeader) mounts and puts through it; the leader is killed (SIGKILL),
// and within twice the lease TTL the other one serves the object.
func TestMooncakeMasterHA(t *testing.T) {
	host := etcdtest.Start(t)
	const ttl = 2 * time.Second
	procs := map[string]func(){}
	for _, flags := range [][]string{
		{"--directory", "etcd://" + host + "/ha-test"},
		{"--enable_ha=true", "--etcd_endpoints=" + host + ";" + host, "--cluster_id=ha-test"},
	} {
		args := append([]string{"mooncake", "master", "--port=0", "--rpc_address=127.0.0.1", "--metrics_port=0",
			"--metrics_host=127.0.0.1", "--enable_metric_reporting=false", "--ha_lease_ttl=2s", "--ha_flush_interval=20ms"}, flags...)
		cmd, addr := startProcess(t, masterBanner+"listening on ", args...)
		procs[addr] = func() { cmd.Process.Signal(syscall.SIGKILL) }
	}
	ctx := context.Background()
	c, err := master.DialLeader(ctx, []string{host}, master.LeaderOptions{Cluster: "ha-test",
		DialOptions: master.DialOptions{OpTimeout: 2 * time.Second}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leader := c.Leader()
	if procs[leader] == nil {
		t.Fatalf("the leader %s is none of the masters %v", leader, procs)
	}
	id := []byte("0123456789abcdef")
	if r, err := c.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: id, Segment: &masterpb.Segment{Name: "node:1", Base: 1 << 30, Size: 1 << 20}}); err != nil || r.GetCode() != 0 {
		t.Fatalf("mount: %v %v", r, err)
	}
	ps, err := c.PutStart(ctx, &masterpb.PutStartRequest{ClientId: id, Key: "k", Size: 4096})
	if err != nil || ps.GetCode() != 0 {
		t.Fatalf("put start: %v %v", ps, err)
	}
	if r, err := c.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: id, Key: "k", Token: ps.GetToken()}); err != nil || r.GetCode() != 0 {
		t.Fatalf("put end: %v %v", r, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := cli.Get(ctx, master.Prefix("ha-test")+"objects/k")
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader did not write the object to etcd: %v %v", r, err)
		}
	}

	start := time.Now()
	procs[leader]()
	for {
		g, err := c.GetReplicaList(ctx, &masterpb.KeysRequest{ClientId: id, Keys: []string{"k"}})
		if err == nil {
			if o := g.GetObjects()[0]; o.GetCode() != 0 || o.GetReplicas()[0].GetAddress() != ps.GetReplicas()[0].GetAddress() {
				t.Fatalf("the object after the failover: %v, want its place %v", o, ps.GetReplicas()[0])
			}
			break
		}
		if time.Since(start) > 2*ttl {
			t.Fatalf("no get served within %v of the leader's kill: %v", 2*ttl, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover: the new leader %s served %v after the leader was killed", c.Leader(), time.Since(start).Round(time.Millisecond))
	if c.Leader() == leader || !strings.HasPrefix(c.Leader(), "127.0.0.1:") {
		t.Fatalf("the client follows %s after %s was killed", c.Leader(), leader)
	}
}

package kv

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// etcdCalls sums the embedded etcd's counters of what its clients asked
// of it: range requests (lists and look-ups), messages on watch streams
// (watches opened and progress requests: a fence's syncs) and lease
// keep-alives.
func etcdCalls(t *testing.T) (ranges, watchMsgs, keepAlives float64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			method := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					method = l.GetValue()
				}
			}
			switch {
			case mf.GetName() == "etcd_mvcc_range_total":
				ranges += m.GetCounter().GetValue()
			case mf.GetName() == "grpc_server_msg_received_total" && method == "Watch":
				watchMsgs += m.GetCounter().GetValue()
			case mf.GetName() == "grpc_server_msg_received_total" && method == "LeaseKeepAlive":
				keepAlives += m.GetCounter().GetValue()
			}
		}
	}
	return
}

// TestClusterDirectoryLoad: idle KV servers registered in one etcd cost it
// no lists once they follow it: each lists it once, then follows its
// watch and syncs (a progress request, one small message) every period.
// It logs what each server asks of etcd per second, and fails if it still
// lists it over and over (more than 0.2 range requests a second).
func TestClusterDirectoryLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("16 servers idle for 10 s: skipped in -short mode")
	}
	host := etcdtest.Start(t)
	dir := "etcd://" + host + "/load"
	const n = 16
	var servers []*Server
	for i := range n {
		servers = append(servers, serveInProcess(t, xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 8,
			Directory: dir, NodeID: fmt.Sprint("kv-", i), DirectoryTTL: 10 * time.Second}))
	}
	time.Sleep(3 * time.Second) // past the joins
	const window = 10 * time.Second
	r0, w0, k0 := etcdCalls(t)
	time.Sleep(window)
	r1, w1, k1 := etcdCalls(t)
	per := func(a, b float64) float64 { return (b - a) / n / window.Seconds() }
	ranges, syncs, keeps := per(r0, r1), per(w0, w1), per(k0, k1)
	t.Logf("per idle server per second, %d servers: %.2f range requests, %.2f watch-stream messages (syncs), %.2f lease keep-alives", n, ranges, syncs, keeps)
	if ranges > 0.2 {
		t.Errorf("%.2f range requests per server per second: the servers list the directory, want at most 0.2", ranges)
	}
	for i, s := range servers {
		// What its metrics say: serving (a server starved of CPU for a
		// moment may be between confirmations), and it never dropped its
		// values.
		reg := prometheus.NewRegistry()
		reg.MustRegister(newServerMetrics(s))
		got := map[string]float64{}
		gather := func() bool {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
			return got["xfer_kv_fence_serving"] == 1
		}
		waitFor(t, 10*time.Second, fmt.Sprint("server kv-", i, " serving"), gather)
		if got["xfer_kv_fence_breaks_total"] != 0 {
			t.Errorf("server kv-%d dropped all its values %v times", i, got["xfer_kv_fence_breaks_total"])
		}
	}
}

// serveInProcess starts a KV server of engine cfg in this process, serving
// and advertised on a loopback port until the test ends.
func serveInProcess(t *testing.T, cfg xfer.Config) *Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewServer(ctx, ServerOptions{Engine: cfg})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err == nil {
		err = s.Advertise(ctx, lis.Addr().String())
	}
	if err != nil {
		cancel()
		s.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Serve(ctx, lis); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return s
}

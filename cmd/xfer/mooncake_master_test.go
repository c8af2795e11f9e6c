package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/xferio/xfer/mooncake"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// TestMooncakeMasterCommand runs `xfer mooncake master` on free ports with
// Mooncake's flags as CI gives them, puts and gets an object through it,
// reads its metrics with Prometheus's parser and its co-located metadata
// server, and stops it.
func TestMooncakeMasterCommand(t *testing.T) {
	t.Setenv("XFER_SECRET", "")
	t.Setenv("XFER_SECRET_FILE", "")
	t.Setenv("MC_METADATA_HTTP_TOKEN", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"mooncake", "master", "--port", "0", "--rpc_address=127.0.0.1",
			"--metrics_port=0", "--metrics_host", "127.0.0.1", "--default_kv_lease_ttl=500", "--enable_metric_reporting=false",
			"--eviction_high_watermark_ratio=0.95", "--client_ttl", "20", "--rpc_thread_num=4",
			"--enable_http_metadata_server", "--http_metadata_server_port=0", "--http_metadata_server_host=127.0.0.1"}, pw, io.Discard)
		pw.Close()
	}()
	rd := bufio.NewReader(pr)
	var lines []string
	for range 4 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("banner: %v (so far %q)", err, lines)
		}
		lines = append(lines, strings.TrimSpace(line))
	}
	go io.Copy(io.Discard, pr)
	addr, ok := strings.CutPrefix(lines[0], masterBanner+"listening on ")
	metrics, ok2 := strings.CutPrefix(lines[1], masterBanner+"metrics on ")
	_, ok4 := strings.CutPrefix(lines[2], masterBanner+"data plane on ")
	meta, ok3 := strings.CutPrefix(lines[3], masterBanner+"metadata server on ")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatalf("banner %q", lines)
	}

	c, err := master.Dial(ctx, addr, master.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	g, err := c.GetReplicaList(ctx, &masterpb.KeysRequest{Keys: []string{"k"}})
	if err != nil || g.GetObjects()[0].GetLeaseMs() != 500 {
		t.Fatalf("get: %v %v, want a lease of 500 ms (--default_kv_lease_ttl=500)", g, err)
	}
	if p, err := c.Ping(ctx, &masterpb.PingRequest{ClientId: id}); err != nil || p.GetClientTtlMs() != 20000 || p.GetRemount() {
		t.Fatalf("ping: %v %v", p, err)
	}

	code, body := httpGet(t, metrics)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", metrics, code)
	}
	mfs := parseExposition(t, body)
	for name, want := range map[string]float64{"xfer_mooncake_master_objects": 1, "xfer_mooncake_master_put_ends_total": 1, "xfer_mooncake_master_segments": 1} {
		if got := counter(mfs, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	promtoolCheckMetrics(t, body)

	s, err := mooncake.OpenStore(ctx, meta, mooncake.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, "mooncake/ram/x", []byte("{}")); err != nil {
		t.Fatalf("the co-located metadata server: %v", err)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("master exited %d when stopped", code)
	}
}

// TestMooncakeMasterFlags gives flags the master refuses: each fails
// with an error naming it, before anything listens.
func TestMooncakeMasterFlags(t *testing.T) {
	t.Setenv("XFER_SECRET", "")
	t.Setenv("XFER_SECRET_FILE", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--enable_ha=true"}, "--enable_ha: no etcd"},
		{[]string{"--enable_ha"}, "--enable_ha: no etcd"},
		{[]string{"--enable_ha", "--etcd_endpoints=127.0.0.1:1", "--ha_backend_type=redis"}, "--ha_backend_type=redis: not supported"},
		{[]string{"--enable_ha", "--etcd_endpoints=127.0.0.1:1", "--directory=etcd://127.0.0.1:1"}, "give one of them"},
		{[]string{"--directory=http://127.0.0.1:1"}, "--directory http://127.0.0.1:1: want etcd://"},
		{[]string{"--directory=etcd://127.0.0.1:1/a", "--cluster_id=b"}, "--cluster_id"},
		{[]string{"--directory=etcd://127.0.0.1:1", "--ha_lease_ttl=0"}, "--ha_lease_ttl=0"},
		{[]string{"--directory=etcd://127.0.0.1:1", "--ha_flush_interval=2h"}, "--ha_flush_interval=2h"},
		{[]string{"--enable_oplog"}, "--enable_oplog: not supported"},
		{[]string{"--enable_snapshot=true"}, "--enable_snapshot: not supported"},
		{[]string{"--memory_allocator=cachelib"}, "--memory_allocator=cachelib: not supported"},
		{[]string{"--allocation_strategy", "free_ratio_first"}, "--allocation_strategy=free_ratio_first"},
		{[]string{"--rpc_enable_tcp_no_delay=false"}, "--rpc_enable_tcp_no_delay=false"},
		{[]string{"--default_kv_lease_ttl=10d"}, "--default_kv_lease_ttl=10d"},
		{[]string{"--default_kv_soft_pin_ttl=2h", "--max_kv_soft_pin_ttl=1h"}, "above --max_kv_soft_pin_ttl"},
		{[]string{"--eviction_ratio=1.5"}, "--eviction_ratio"},
		{[]string{"--eviction_high_watermark_ratio=0"}, "--eviction_high_watermark_ratio"},
		{[]string{"--client_ttl=0"}, "--client_ttl"},
		{[]string{"--port", "70000"}, "--port 70000"},
		{[]string{"--rpc_interface", "no-such-if0"}, "--rpc_interface no-such-if0"},
		{[]string{"--no_such_flag=1"}, "unknown flag: --no_such_flag"},
	} {
		var e strings.Builder
		code := run(context.Background(), append([]string{"mooncake", "master", "--port=0", "--metrics_port=0", "--rpc_address=127.0.0.1", "--metrics_host=127.0.0.1"}, tc.args...), io.Discard, &e)
		if code == 0 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error naming %q", tc.args, code, e.String(), tc.want)
		}
	}
}

package kv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/kv/kvpb"
	"github.com/xferio/xfer/probe"
	"github.com/xferio/xfer/transport/verbs"
)

// rdmaDevice is the RDMA device the tests' engines use ("" outside TestRDMA).
var rdmaDevice string

// TestRDMA runs the KV service over real verbs (make verbs-test runs it in
// the VM on rxe and on siw): GETs are the server's RDMA WRITEs into the
// client's buffer, PUTs its RDMA READs.
func TestRDMA(t *testing.T) {
	rdmaDevice = testutil.RequireVerbs(t)
	defer func() { rdmaDevice = "" }()
	const rdma = xfer.PolicyRDMA
	t.Run("PutGetDelete", func(t *testing.T) {
		for _, mode := range modes {
			t.Run(mode, func(t *testing.T) { testPutGetDelete(t, rdma, mode) })
		}
	})
	t.Run("DiskTier", func(t *testing.T) {
		// 256 values of 1 MiB through a 64 MiB pool and a disk tier, read
		// back by the server's RDMA WRITEs, before and after a restart.
		testDiskTier(t, rdma)
	})
	t.Run("DiskTierKill", func(t *testing.T) {
		// 20 SIGKILLs during writes, then restarts: 0 corrupt values.
		testDiskTierKill(t, rdma)
	})
	t.Run("ClusterLosesServer", func(t *testing.T) {
		// Three KV server processes in an embedded etcd, the data plane
		// over rdma only (the policy admits no fallback).
		testClusterLosesServer(t, rdma)
	})
	t.Run("Metrics", func(t *testing.T) {
		// The server's engine reports the peer connected over the rdma
		// device, and its status names the device, GID and MTU in use.
		reg := prometheus.NewRegistry()
		s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: rdma}, Metrics: reg})
		c := dial(t, s.addr, rdma)
		ctx := ctxT(t)
		if err := c.Put(ctx, "k", pattern(100<<10, 1)); err != nil {
			t.Fatal(err)
		}
		var d *verbs.DeviceInUse
		for _, tr := range s.Engine().Status().Transports {
			if tr.Name == "rdma" {
				d = tr.Device
			}
		}
		if d == nil || (rdmaDevice != "" && d.Device != rdmaDevice) || d.MTU <= 0 || d.Port <= 0 || d.GIDType == "" {
			t.Fatalf("status of the rdma transport: device %+v, want %s with its port, GID type and MTU", d, rdmaDevice)
		}
		var got strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "xfer_peers_connected" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[1].GetValue() == "rdma" {
					fmt.Fprintf(&got, "%s %v\n", m.GetLabel()[0].GetValue(), m.GetGauge().GetValue())
				}
			}
		}
		if got.String() != d.Device+" 1\n" {
			t.Errorf("xfer_peers_connected over rdma (device value): %q, want %q", got.String(), d.Device+" 1\n")
		}
	})
	t.Run("AllowedGIDs", func(t *testing.T) {
		// A server whose security.rdma.allowed_gids leaves out the
		// client's GID does not serve it over rdma: under auto the client
		// gets another transport, under rdma none; the refusals are
		// counted.
		deny := xfer.SecurityConfig{RDMA: xfer.SecurityRDMAConfig{AllowedGIDs: []string{"fe80::dead:beef"}}}
		s := startServer(t, ServerOptions{Engine: xfer.Config{Security: deny}})
		c := dial(t, s.addr, xfer.PolicyAuto)
		if err := c.Put(ctxT(t), "k", pattern(64<<10, 1)); err != nil {
			t.Fatal(err)
		}
		if tr := c.Transport(); tr == "rdma" || tr == "" {
			t.Fatalf("client transport %q, want a fallback from rdma", tr)
		}
		_, err := Dial(ctxT(t), s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: rdma, MemoryMB: 4, RDMA: xfer.RDMAConfig{Device: rdmaDevice}}, FailFast: true})
		if err == nil {
			t.Fatal("a client with a GID outside allowed_gids connected over rdma")
		}
		n := uint64(0)
		for _, f := range s.Engine().Status().AuthFailures {
			if f.Plane == xfer.PlanePeer && f.Reason == xfer.ReasonNotAllowed {
				n += f.Count
			}
		}
		if n < 2 {
			t.Fatalf("not_allowed refusals: %+v", s.Engine().Status().AuthFailures)
		}
	})
	t.Run("BadBuffer", func(t *testing.T) {
		s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: rdma}})
		c := dial(t, s.addr, rdma)
		ctx := ctxT(t)
		if got := c.Transport(); got != "rdma" {
			t.Fatalf("data plane on %q", got)
		}
		v := pattern(100<<10, 4)
		if err := c.Put(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
		buf := canary(t, c.Engine(), 128<<10, 0x5A)
		for name, mutate := range map[string]func(*xfer.RegionDesc){
			"wrong key":    func(d *xfer.RegionDesc) { d.Key ^= 0x5555 },
			"out of range": func(d *xfer.RegionDesc) { d.Addr += 1 << 30 },
		} {
			d := buf.Desc()
			mutate(&d)
			b, _ := d.MarshalBinary()
			_, err := c.rpc.Get(ctx, &kvpb.GetRequest{Key: []byte("k"), Buffer: b})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "refused") {
				t.Errorf("%s: %v, want INVALID_ARGUMENT refused", name, err)
			}
		}
		untouched(t, buf, 0x5A, "the client's buffer")
		got, err := c.Get(ctx, "k")
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get after refused requests: %v", err)
		}
	})
	t.Run("DevicesAsRails", func(t *testing.T) {
		// --devices 2 is one engine over two rails: the VM's device and a
		// second one of its type on a dummy netdev. Values cut over both
		// rails (the server's WRITEs and READs of each) come back whole.
		dev := rdmaDevice
		second := addSoftDevice(t, dev)
		rdmaDevice = "" // the server picks the host's devices itself
		defer func() { rdmaDevice = dev }()
		s := startServer(t, ServerOptions{Devices: 2, Engine: xfer.Config{Transport: rdma, MemoryMB: 64, RDMA: xfer.RDMAConfig{SliceSize: 256 << 10}}})
		if n := len(s.Engines()); n != 1 {
			t.Fatalf("%d data-plane engines, want one over two rails", n)
		}
		// The client's rails in the server's order: rail 0 is each side's
		// first device, and libibverbs may list a device added later first.
		devs, err := probe.Devices()
		if err != nil || len(devs) < 2 {
			t.Fatalf("devices after adding %s: %v, %v", second, devs, err)
		}
		order := []string{devs[0].Name, devs[1].Name}
		if !slices.Contains(order, dev) || !slices.Contains(order, second) {
			t.Fatalf("the host's first two devices are %v, want %s and %s", order, dev, second)
		}
		c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: rdma, MemoryMB: 32, RDMA: xfer.RDMAConfig{Devices: order}}})
		ctx := ctxT(t)
		for i := range 8 {
			v := pattern(4<<20, byte(i))
			if err := c.Put(ctx, fmt.Sprint(i), v); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, fmt.Sprint(i))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %d: %v", i, err)
			}
		}
		var rails []xfer.RailStatus
		for _, tr := range s.Engine().Status().Transports {
			if tr.Name == "rdma" {
				rails = tr.Rails
			}
		}
		t.Logf("server's rails: %+v", rails)
		if len(rails) != 2 || rails[0].Device != order[0] || rails[1].Device != order[1] || rails[0].Ops == 0 || rails[1].Ops == 0 || rails[0].Down+rails[1].Down != 0 {
			t.Fatalf("server's rails %+v; want %v, both up with operations done", rails, order)
		}
	})
	t.Run("Integrity", func(t *testing.T) { integrity(t, rdma, 2_000) })
	t.Run("BigValues", func(t *testing.T) {
		s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: rdma, MemoryMB: 64}})
		c := dial(t, s.addr, rdma)
		ctx := ctxT(t)
		for i, n := range []int{1 << 20, 8 << 20} {
			v := pattern(n, byte(i))
			if err := c.Put(ctx, fmt.Sprint(n), v); err != nil {
				t.Fatal(err)
			}
			got, err := c.Get(ctx, fmt.Sprint(n))
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("get %d bytes: %v", n, err)
			}
		}
	})
}

// addSoftDevice adds a second software RDMA device of dev's type (rxe or
// siw) on a dummy netdev of its own, waits for its port to be ACTIVE, and
// deletes both when the test ends. It returns the device's name.
func addSoftDevice(t *testing.T, dev string) string {
	t.Helper()
	typ := dev[:min(3, len(dev))]
	if typ != "rxe" && typ != "siw" {
		testutil.SkipOrFail(t, dev+" is not rxe or siw: the test adds a second software device of its type")
	}
	for _, tool := range []string{"rdma", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "the "+tool+" tool (iproute2) is needed to add a second device: "+err.Error())
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	second := typ + "8"
	run("ip", "link", "add", "xfkvrail1", "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", "xfkvrail1").Run() })
	run("ip", "addr", "add", "10.0.19.1/24", "dev", "xfkvrail1")
	run("ip", "link", "set", "xfkvrail1", "up")
	run("rdma", "link", "add", second, "type", typ, "netdev", "xfkvrail1")
	// Registered first, so it runs after the servers' and clients' own.
	t.Cleanup(func() { exec.Command("rdma", "link", "delete", second).Run() })
	// Usable as an engine would use it (its port ACTIVE, a GID to
	// connect with): a server that found it unusable would connect its
	// peers over one rail, and say so in its log.
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, _ := os.ReadFile(filepath.Join("/sys/class/infiniband", second, "ports/1/state"))
		err := fmt.Errorf("port 1 is %q", strings.TrimSpace(string(b)))
		if strings.Contains(string(b), "ACTIVE") {
			tr := verbs.New(verbs.Config{Device: second}, nil)
			err = tr.Available()
			tr.Close()
			if err == nil {
				return second
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not usable 20s after it was added: %v", second, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

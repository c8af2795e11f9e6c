package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// TestTwoNodePagesRDMA: one node serves pages and the other fetches and
// verifies them over rdma, across a veth pair with an RDMA device on each
// end. It runs inside tools/rdma-vm only (it adds devices and routing
// rules), once with XFER_TEST_DEVICE=rxe0 and once with siw0:
//
//   - siw: two network namespaces, a siw device on each end of the veth
//     pair. siw's connections are kernel TCP sockets of the namespace
//     that makes them.
//   - rxe: both ends in the root namespace. The guest kernel's SoftRoCE
//     (6.1) opens its UDP socket and looks up its routes in the root
//     namespace only, so an rxe device in another namespace can send but
//     never receive. Instead, routing rules send the traffic between the
//     two addresses out of one end of the pair and into the other, rather
//     than through the loopback device.
//
// Either way, the bytes node A's end of the pair sent are checked against
// the pages fetched: the pages crossed the veth pair.
func TestTwoNodePagesRDMA(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if os.Getenv(testutil.EnvRDMAVM) == "" {
		testutil.SkipOrFail(t, "two RDMA nodes are made inside tools/rdma-vm only: the test adds RDMA devices and routing rules")
	}
	bin := xferBinary(t)
	kind := "rxe"
	if strings.HasPrefix(dev, "siw") {
		kind = "siw"
	}
	var n nodePair
	if kind == "siw" {
		n = twoNodes(t)
	} else {
		n = rootVethPair(t)
	}
	devA, devB := fmt.Sprintf("x%sa%d", kind, os.Getpid()%10000), fmt.Sprintf("x%sb%d", kind, os.Getpid()%10000)
	for _, d := range []struct {
		a         bool
		dev, veth string
	}{{true, devA, n.vethA}, {false, devB, n.vethB}} {
		if out, err := n.cmd(context.Background(), d.a, "rdma", "link", "add", d.dev, "type", kind, "netdev", d.veth).CombinedOutput(); err != nil {
			t.Fatalf("rdma link add %s type %s netdev %s: %v: %s", d.dev, kind, d.veth, err, out)
		}
		t.Cleanup(func() { exec.Command("rdma", "link", "delete", d.dev).Run() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := servePagesOn(t, ctx, n, bin, []string{envDevice + "=" + devA}, "--transport", "rdma")
	for _, depth := range []string{"1", "32"} {
		before := n.txBytes(t)
		r := benchPagesOn(t, ctx, n, bin, []string{envDevice + "=" + devB}, addr, "--transport", "rdma", "--duration", "2s", "--depth", depth)
		sent := n.txBytes(t) - before
		if !r.Verified || r.Pages == 0 || r.Transport != "rdma" {
			t.Fatalf("depth %s: %+v", depth, r)
		}
		if sent < r.Pages*int64(r.PageSize) {
			t.Fatalf("depth %s: %d pages fetched, but node A's end of the veth pair sent only %d bytes: the pages went another way", depth, r.Pages, sent)
		}
		t.Logf("%s to %s over %s, depth %s: %d pages verified, p50 %.1f µs, p99 %.1f µs, %.0f pages/s; %s sent %d bytes",
			devB, devA, kind, depth, r.Pages, r.P50us, r.P99us, r.PagesPerS, n.vethA, sent)
	}
}

// rootVethPair makes a veth pair in the root namespace, 10.77.N.1 on one
// end and 10.77.N.2 on the other, with routing rules that send traffic
// from either address to the other out of its own end (the local table
// would take it through the loopback device), and undoes it all when the
// test ends. Only for a throw-away VM: it moves the root namespace's rule
// for the local table.
func rootVethPair(t *testing.T) nodePair {
	t.Helper()
	n := vethNames()
	ipCmd(t, "link", "add", n.vethA, "type", "veth", "peer", "name", n.vethB)
	t.Cleanup(func() { exec.Command("ip", "link", "del", n.vethA).Run() })
	ipCmd(t, "addr", "add", n.ipA+"/24", "dev", n.vethA)
	ipCmd(t, "addr", "add", n.ipB+"/24", "dev", n.vethB)
	// A packet from one of our own addresses arrives at the other end:
	// accept it rather than drop it as a martian.
	for _, k := range []string{"all", n.vethA, n.vethB} {
		for _, kv := range []string{"accept_local=1", "rp_filter=0"} {
			key, v, _ := strings.Cut(kv, "=")
			path := "/proc/sys/net/ipv4/conf/" + k + "/" + key
			old, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.WriteFile(path, old, 0o644) })
		}
	}
	ipCmd(t, "link", "set", n.vethA, "up")
	ipCmd(t, "link", "set", n.vethB, "up")
	// The local table after the pair's own rules, which only locally
	// sent packets (iif lo) match.
	ipCmd(t, "rule", "add", "pref", "100", "lookup", "local")
	ipCmd(t, "rule", "del", "pref", "0")
	t.Cleanup(func() {
		exec.Command("ip", "rule", "add", "pref", "0", "lookup", "local").Run()
		exec.Command("ip", "rule", "del", "pref", "100").Run()
	})
	for i, r := range []struct{ from, to, dev string }{{n.ipB, n.ipA, n.vethB}, {n.ipA, n.ipB, n.vethA}} {
		table := fmt.Sprint(1000 + i)
		ipCmd(t, "route", "add", r.to+"/32", "dev", r.dev, "src", r.from, "table", table)
		ipCmd(t, "rule", "add", "pref", fmt.Sprint(10+i), "iif", "lo", "from", r.from, "to", r.to, "lookup", table)
		t.Cleanup(func() {
			exec.Command("ip", "rule", "del", "pref", fmt.Sprint(10+i)).Run()
			exec.Command("ip", "route", "flush", "table", table).Run()
		})
	}
	if out, err := exec.Command("ip", "route", "get", n.ipA, "from", n.ipB).CombinedOutput(); err != nil || !strings.Contains(string(out), "dev "+n.vethB) {
		t.Fatalf("route from %s to %s does not use the veth pair: %v: %s", n.ipB, n.ipA, err, out)
	}
	return n
}

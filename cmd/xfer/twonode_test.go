package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// envRequireNetns makes the two-node tests fail, instead of skipping, where
// network namespaces cannot be made (CI sets it).
const envRequireNetns = "XFER_REQUIRE_NETNS"

// twoNodes makes two network namespaces joined by a veth pair, 10.77.N.1
// in the first and 10.77.N.2 in the second, and removes them when the test
// ends. It returns the namespaces' names and addresses.
func twoNodes(t *testing.T) (nsA, nsB, ipA, ipB string) {
	t.Helper()
	skip := func(why string) {
		if os.Getenv(envRequireNetns) == "1" {
			t.Fatalf("%s=1 but %s", envRequireNetns, why)
		}
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		skip("two nodes need network namespaces, which need root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		skip("two nodes need iproute2's ip command")
	}
	n := os.Getpid() % 250
	nsA, nsB = fmt.Sprintf("xfer-a-%d", os.Getpid()), fmt.Sprintf("xfer-b-%d", os.Getpid())
	ipA, ipB = fmt.Sprintf("10.77.%d.1", n), fmt.Sprintf("10.77.%d.2", n)
	vA, vB := fmt.Sprintf("xva%d", os.Getpid()%100000), fmt.Sprintf("xvb%d", os.Getpid()%100000)
	do := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command(ip, "netns", "add", nsA).CombinedOutput(); err != nil {
		skip(fmt.Sprintf("ip netns add: %v: %s", err, out))
	}
	t.Cleanup(func() { exec.Command(ip, "netns", "del", nsA).Run() })
	do("netns", "add", nsB)
	t.Cleanup(func() { exec.Command(ip, "netns", "del", nsB).Run() })
	do("link", "add", vA, "type", "veth", "peer", "name", vB)
	do("link", "set", vA, "netns", nsA)
	do("link", "set", vB, "netns", nsB)
	do("-n", nsA, "addr", "add", ipA+"/24", "dev", vA)
	do("-n", nsB, "addr", "add", ipB+"/24", "dev", vB)
	for _, ns := range []string{nsA, nsB} {
		do("-n", ns, "link", "set", "lo", "up")
	}
	do("-n", nsA, "link", "set", vA, "up")
	do("-n", nsB, "link", "set", vB, "up")
	return nsA, nsB, ipA, ipB
}

// TestTwoNodePages: one node serves pages, the other fetches and verifies
// them, across a veth pair between two network namespaces over tcp.
func TestTwoNodePages(t *testing.T) {
	bin := xferBinary(t)
	nsA, nsB, ipA, _ := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", nsA, bin, "pages", "serve", "--listen", ipA+":0", "--size", "16MiB", "--stamp", "--transport", "tcp")
	srv.Env = cleanEnv()
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var serr syncBuffer
	srv.Stderr = &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("pages serve: %v; stderr:\n%s", err, serr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), pagesBanner)
	if !ok || !strings.HasPrefix(addr, ipA+":") {
		t.Fatalf("pages serve printed %q", line)
	}
	for _, depth := range []string{"1", "32"} {
		bench := exec.CommandContext(ctx, "ip", "netns", "exec", nsB, bin, "pages", "bench", "--peer", addr, "--transport", "tcp", "--duration", "500ms", "--depth", depth, "--verify", "--json")
		bench.Env = cleanEnv()
		b, err := bench.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("pages bench in %s: %v\n%s", nsB, err, stderr)
		}
		var r pagesResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if !r.Verified || r.Pages == 0 || r.Transport != "tcp" {
			t.Fatalf("depth %s: %+v", depth, r)
		}
		t.Logf("across the veth pair, depth %s: %d pages verified, p50 %.1f µs, p99 %.1f µs, %.0f pages/s", depth, r.Pages, r.P50us, r.P99us, r.PagesPerS)
	}
	// From the other namespace the server's address is unreachable
	// without the veth pair: the pages really crossed it. (A node in the
	// first namespace cannot be reached from the root namespace.)
	if c, err := exec.Command("ip", "netns", "exec", nsB, "ip", "route", "get", ipA).CombinedOutput(); err != nil || !strings.Contains(string(c), "dev xvb") {
		t.Fatalf("route from %s to %s does not use the veth pair: %v: %s", nsB, ipA, err, c)
	}
}

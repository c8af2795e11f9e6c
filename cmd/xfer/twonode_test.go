package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/bench"
)

// envRequireNetns makes the two-node tests fail, instead of skipping, where
// network namespaces cannot be made (CI sets it).
const envRequireNetns = "XFER_REQUIRE_NETNS"

// nodePair is two nodes joined by a veth pair: node A has address ipA on
// vethA, in namespace nsA, and node B likewise ("" for the root namespace).
type nodePair struct {
	nsA, nsB     string
	ipA, ipB     string
	vethA, vethB string
}

// cmd returns a command that runs name with args in node A's namespace
// (a) or node B's.
func (n nodePair) cmd(ctx context.Context, a bool, name string, args ...string) *exec.Cmd {
	ns := n.nsB
	if a {
		ns = n.nsA
	}
	if ns == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// txBytes is how many bytes node A's end of the veth pair has sent.
func (n nodePair) txBytes(t *testing.T) int64 {
	t.Helper()
	out, err := n.cmd(context.Background(), true, "cat", "/sys/class/net/"+n.vethA+"/statistics/tx_bytes").Output()
	if err != nil {
		t.Fatalf("tx_bytes of %s: %v", n.vethA, err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("tx_bytes of %s: %v", n.vethA, err)
	}
	return v
}

// ipCmd runs ip with args, failing the test if it fails.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// vethNames returns the names and addresses of this test process's veth
// pair: 10.77.N.1 and 10.77.N.2.
func vethNames() (n nodePair) {
	pid := os.Getpid()
	n.ipA, n.ipB = fmt.Sprintf("10.77.%d.1", pid%250), fmt.Sprintf("10.77.%d.2", pid%250)
	n.vethA, n.vethB = fmt.Sprintf("xva%d", pid%100000), fmt.Sprintf("xvb%d", pid%100000)
	return n
}

// twoNodes makes two network namespaces joined by a veth pair, 10.77.N.1
// in the first and 10.77.N.2 in the second, and removes them when the test
// ends.
func twoNodes(t *testing.T) nodePair {
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
	n := vethNames()
	n.nsA, n.nsB = fmt.Sprintf("xfer-a-%d", os.Getpid()), fmt.Sprintf("xfer-b-%d", os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", n.nsA).CombinedOutput(); err != nil {
		skip(fmt.Sprintf("ip netns add: %v: %s", err, out))
	}
	t.Cleanup(func() { exec.Command(ip, "netns", "del", n.nsA).Run() })
	ipCmd(t, "netns", "add", n.nsB)
	t.Cleanup(func() { exec.Command(ip, "netns", "del", n.nsB).Run() })
	ipCmd(t, "link", "add", n.vethA, "type", "veth", "peer", "name", n.vethB)
	ipCmd(t, "link", "set", n.vethA, "netns", n.nsA)
	ipCmd(t, "link", "set", n.vethB, "netns", n.nsB)
	ipCmd(t, "-n", n.nsA, "addr", "add", n.ipA+"/24", "dev", n.vethA)
	ipCmd(t, "-n", n.nsB, "addr", "add", n.ipB+"/24", "dev", n.vethB)
	for _, ns := range []string{n.nsA, n.nsB} {
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(t, "-n", n.nsA, "link", "set", n.vethA, "up")
	ipCmd(t, "-n", n.nsB, "link", "set", n.vethB, "up")
	return n
}

// servePagesOn starts xfer pages serve on node A with extra arguments and
// environment, and returns the address it listens on. The server stops
// when the test ends.
func servePagesOn(t *testing.T, ctx context.Context, n nodePair, bin string, env []string, args ...string) string {
	t.Helper()
	addr := servePagesIn(t, ctx, n, true, bin, env, n.ipA+":0", append([]string{"--size", "16MiB", "--stamp"}, args...)...)
	if !strings.HasPrefix(addr, n.ipA+":") {
		t.Fatalf("pages serve listens on %q, not on %s", addr, n.ipA)
	}
	return addr
}

// servePagesIn starts xfer pages serve in node A's namespace (a) or node
// B's, listening on listen, and returns its address. The server stops when
// the test ends.
func servePagesIn(t *testing.T, ctx context.Context, n nodePair, a bool, bin string, env []string, listen string, args ...string) string {
	t.Helper()
	srv := n.cmd(ctx, a, bin, append([]string{"pages", "serve", "--listen", listen}, args...)...)
	srv.Env = cleanEnv(env...)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var serr syncBuffer
	srv.Stderr = &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Signal(os.Interrupt)
		srv.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("pages serve: %v; stderr:\n%s", err, serr.String())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), pagesBanner)
	if !ok {
		t.Fatalf("pages serve printed %q", line)
	}
	return addr
}

// benchPagesOn runs xfer pages bench --verify --json on node B against
// addr and returns its result.
func benchPagesOn(t *testing.T, ctx context.Context, n nodePair, bin string, env []string, addr string, args ...string) bench.PagesResult {
	t.Helper()
	cmd := n.cmd(ctx, false, bin, append([]string{"pages", "bench", "--peer", addr, "--verify", "--json"}, args...)...)
	cmd.Env = cleanEnv(env...)
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("pages bench on node B: %v\n%s", err, stderr)
	}
	var r bench.PagesResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return r
}

// TestTwoNodePages: one node serves pages, the other fetches and verifies
// them, across a veth pair between two network namespaces over tcp.
func TestTwoNodePages(t *testing.T) {
	bin := xferBinary(t)
	n := twoNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := servePagesOn(t, ctx, n, bin, nil, "--transport", "tcp")
	for _, depth := range []string{"1", "32"} {
		r := benchPagesOn(t, ctx, n, bin, nil, addr, "--transport", "tcp", "--duration", "500ms", "--depth", depth)
		if !r.Verified || r.Pages == 0 || r.Transport != "tcp" {
			t.Fatalf("depth %s: %+v", depth, r)
		}
		t.Logf("across the veth pair, depth %s: %d pages verified, p50 %.1f µs, p99 %.1f µs, %.0f pages/s", depth, r.Pages, r.P50us, r.P99us, r.PagesPerS)
	}
	// From the other namespace the server's address is unreachable
	// without the veth pair: the pages really crossed it. (A node in the
	// first namespace cannot be reached from the root namespace.)
	if c, err := exec.Command("ip", "netns", "exec", n.nsB, "ip", "route", "get", n.ipA).CombinedOutput(); err != nil || !strings.Contains(string(c), "dev "+n.vethB) {
		t.Fatalf("route from %s to %s does not use the veth pair: %v: %s", n.nsB, n.ipA, err, c)
	}
}

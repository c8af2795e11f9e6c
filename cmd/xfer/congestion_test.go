package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestTwoNodeCongestion: under tcp.congestion auto, the connections
// between two hosts (two network namespaces joined by a veth pair) keep
// the system's default congestion control on both ends, and those between
// two processes of one host run reno on both ends, the dialer's and the
// acceptor's.
func TestTwoNodeCongestion(t *testing.T) {
	bin := xferBinary(t)
	n := twoNodes(t)
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("needs iproute2's ss")
	}
	// Both namespaces' default: an algorithm other than reno, so that the
	// two cases differ.
	avail, err := n.cmd(context.Background(), true, "cat", "/proc/sys/net/ipv4/tcp_available_congestion_control").Output()
	if err != nil {
		t.Fatal(err)
	}
	def := ""
	for _, a := range strings.Fields(string(avail)) {
		if a != "reno" {
			def = a
			break
		}
	}
	if def == "" {
		t.Skipf("the kernel has no congestion control but reno (%s)", strings.TrimSpace(string(avail)))
	}
	for _, a := range []bool{true, false} {
		if out, err := n.cmd(context.Background(), a, "sysctl", "-w", "net.ipv4.tcp_congestion_control="+def).CombinedOutput(); err != nil {
			t.Fatalf("sysctl: %v: %s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cases := []struct {
		name   string
		listen string
		want   string
	}{
		{"two hosts", n.ipA + ":0", def},
		{"one host", "127.0.0.1:0", "reno"},
	}
	for _, c := range cases {
		// Two hosts: the server on node A, the client on node B. One
		// host: both on node B.
		onA := c.want == def
		addr := servePagesIn(t, ctx, n, onA, bin, nil, c.listen, "--size", "16MiB", "--transport", "tcp")
		_, port, _ := strings.Cut(addr, ":")
		bench := n.cmd(ctx, false, bin, "pages", "bench", "--peer", addr, "--transport", "tcp", "--duration", "3s", "--depth", "32")
		bench.Env = cleanEnv()
		if err := bench.Start(); err != nil {
			t.Fatal(err)
		}
		// Each side's view: the server's connections, and the client's.
		var server, client []string
		deadline := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(deadline) && (len(server) < 2 || len(client) < 2) {
			time.Sleep(200 * time.Millisecond)
			server, _ = ends(t, n, onA, port)
			_, client = ends(t, n, false, port)
		}
		if err := bench.Wait(); err != nil {
			t.Fatalf("%s: pages bench: %v", c.name, err)
		}
		if len(server) == 0 || len(client) == 0 {
			t.Fatalf("%s: no connections seen (server %v, client %v)", c.name, server, client)
		}
		for side, got := range map[string][]string{"server": server, "client": client} {
			for _, g := range got {
				if g != c.want {
					t.Errorf("%s: a %s connection runs %s, want %s (all: %v)", c.name, side, g, c.want, got)
					break
				}
			}
		}
	}
}

// ends returns the TCP congestion control of the established
// connections in node A's namespace (a) or node B's, as ss reports it:
// of those whose local port is port (a server's ends) and of those whose
// peer's is (a client's).
func ends(t *testing.T, n nodePair, a bool, port string) (server, client []string) {
	t.Helper()
	out, err := n.cmd(context.Background(), a, "ss", "-tinH", "state", "established").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	for i := 0; i+1 < len(lines); i++ {
		f := strings.Fields(lines[i])
		if len(f) < 4 || !strings.HasPrefix(lines[i+1], "\t") {
			continue
		}
		info := strings.Fields(lines[i+1])
		i++
		if len(info) == 0 {
			continue
		}
		switch {
		case strings.HasSuffix(f[2], ":"+port):
			server = append(server, info[0])
		case strings.HasSuffix(f[3], ":"+port):
			client = append(client, info[0])
		}
	}
	return server, client
}

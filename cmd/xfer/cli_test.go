package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestUnknownSubcommand: a typo in a subcommand of a group (xfer kv) exits
// non-zero with a suggestion, as one of the root's does.
func TestUnknownSubcommand(t *testing.T) {
	env := cleanEnv()
	for _, args := range [][]string{{"kv", "gett"}, {"benc"}} {
		o, e, code := xferRun(t, env, args...)
		if code == 0 || !strings.Contains(e, "unknown command") || !strings.Contains(e, "Did you mean") {
			t.Errorf("xfer %s: exit %d, stdout %q, stderr %q; want an error with a suggestion", strings.Join(args, " "), code, o, e)
		}
	}
	if _, e, code := xferRun(t, env, "kv", "gett"); !strings.Contains(e, "\tget\n") {
		t.Errorf("xfer kv gett: exit %d: %q does not suggest get", code, e)
	}
	// Without a subcommand a group prints its help.
	if o, _, code := xferRun(t, env, "kv"); code != 0 || !strings.Contains(o, "Available Commands") {
		t.Errorf("xfer kv: exit %d: %q", code, o)
	}
}

// TestBenchPlotPathCheckedFirst: an unwritable --plot fails before the
// benchmark runs.
func TestBenchPlotPathCheckedFirst(t *testing.T) {
	xferBinary(t) // built before the clock starts
	start := time.Now()
	_, e, code := xferRun(t, cleanEnv(), "bench", "--transport", "tcp", "--duration", "30s", "--plot", "/nonexistent/dir/x.png")
	if code == 0 || !strings.Contains(e, "/nonexistent/dir") || time.Since(start) > 10*time.Second {
		t.Fatalf("bench --plot into a missing directory: exit %d after %v: %q", code, time.Since(start), e)
	}
}

// TestKVPutStdin: put --file - reads the value from standard input.
func TestKVPutStdin(t *testing.T) {
	addr := startKVServe(t)
	cmd := exec.Command(xferBinary(t), "kv", "put", "--server-addr", addr, "k", "--file", "-")
	cmd.Env = cleanEnv()
	cmd.Stdin = strings.NewReader("from stdin")
	var e bytes.Buffer
	cmd.Stderr = &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("put --file -: %v: %s", err, e.String())
	}
	if o, e, code := xferRun(t, cleanEnv(), "kv", "get", "--server-addr", addr, "k"); code != 0 || o != "from stdin" {
		t.Fatalf("get: exit %d: %q %s", code, o, e)
	}
	o, _, code := xferRun(t, cleanEnv(), "kv", "stats", "--server-addr", addr)
	if code != 0 || !strings.Contains(o, "10 B of values") {
		t.Fatalf("stats: exit %d: %q", code, o)
	}
}

// TestKVBenchLeavesUserData: kv bench writes keys of its own, evicts none
// of the user's and deletes its keys at the end.
func TestKVBenchLeavesUserData(t *testing.T) {
	addr := startKVServe(t) // 64 MiB pool, evicting when full
	env := cleanEnv()
	mine := strings.Repeat("m", 40<<20) // leaves about 24 MiB free
	cmd := exec.Command(xferBinary(t), "kv", "put", "--server-addr", addr, "mine", "--file", "-")
	cmd.Env, cmd.Stdin = env, strings.NewReader(mine)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("put: %v: %s", err, out)
	}
	_, e, code := xferRun(t, env, "kv", "bench", "--server-addr", addr, "--op", "put", "--value-size", "1MiB", "--keys", "100", "--ops", "300", "--json")
	if code != 0 || !strings.Contains(e, "none is evicted") {
		t.Fatalf("bench: exit %d: %s", code, e)
	}
	o, e, code := xferRun(t, env, "kv", "stats", "--server-addr", addr, "--json")
	if code != 0 || !strings.Contains(o, `"keys":1,`) || !strings.Contains(o, `"evictions":0`) {
		t.Fatalf("stats after the bench: exit %d: %s %s", code, o, e)
	}
	if o, e, code := xferRun(t, env, "kv", "get", "--server-addr", addr, "mine"); code != 0 || o != mine {
		t.Fatalf("get mine after the bench: exit %d, %d bytes: %s", code, len(o), e)
	}
}

// startServe runs "xfer serve" on a loopback port and returns its address.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startDaemon(t, serveBanner, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
}

// TestBenchSendTooLarge: a send larger than the peer's max_message names
// the flags that raise it on both sides.
func TestBenchSendTooLarge(t *testing.T) {
	addr := startServe(t, "--transport", "tcp")
	_, e, code := xferRun(t, cleanEnv(), "bench", "--peer", addr, "--op", "send", "--size", "1MiB", "--iters", "10")
	if code == 0 || !strings.Contains(e, "--max-message 1048576") || !strings.Contains(e, "xfer serve --max-message") {
		t.Fatalf("bench --op send 1MiB against a 64KiB peer: exit %d: %q", code, e)
	}
}

// TestKVServeAddresses: kv serve's --listen is the gRPC address and the
// config's listen key the data plane's; neither takes the other's place.
func TestKVServeAddresses(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	data := lis.Addr().String()
	lis.Close()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "xfer.yaml")
	if err := os.WriteFile(cfgFile, []byte("listen: "+data+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rest := startDaemon(t, kvBanner, "--config", cfgFile, "kv", "serve", "--listen", "127.0.0.1:0", "--memory-mb", "16")
	grpcAddr := strings.Fields(rest)[0]
	if grpcAddr == data || !strings.Contains(rest, "data plane "+data) {
		t.Fatalf("kv serve with listen: %s in its config and --listen 127.0.0.1:0: %q; want gRPC on a port of its own and the data plane on %s", data, rest, data)
	}
	if o, e, code := xferRun(t, cleanEnv(), "kv", "put", "--server-addr", grpcAddr, "k", "v"); code != 0 {
		t.Fatalf("put: exit %d: %s %s", code, o, e)
	}
}

// TestBenchStoppedPeer: a bench whose peer is stopped (SIGSTOP) mid-run
// fails within its --op-timeout, with an error that names the peer and
// the timeout, instead of waiting for the peer to come back.
func TestBenchStoppedPeer(t *testing.T) {
	srv, addr := startStoppable(t, serveBanner, "serve", "--listen", "127.0.0.1:0", "--transport", "tcp")
	benchUntilStopped(t, srv, syscall.SIGSTOP, time.Second, []string{addr, "op_timeout", "1s"},
		"bench", "--peer", addr, "--transport", "tcp", "--size", "1MiB", "--duration", "60s", "--op-timeout", "1s")
}

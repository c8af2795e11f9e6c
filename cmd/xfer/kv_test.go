package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// startKVServe runs "xfer kv serve" and returns its gRPC address.
func startKVServe(t *testing.T, args ...string) string {
	t.Helper()
	return startKVServeEnv(t, cleanEnv(), args...)
}

// startKVServeEnv is startKVServe in the environment env.
func startKVServeEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(xferBinary(t), append([]string{"kv", "serve", "--listen", "127.0.0.1:0", "--memory-mb", "64"}, args...)...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out := testutil.StartPiped(t, cmd)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("kv serve did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("kv serve did not exit within 15s of SIGTERM")
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("kv serve: %v", err)
	}
	rest, ok := strings.CutPrefix(line, kvBanner)
	if !ok {
		t.Fatalf("kv serve printed %q", line)
	}
	return strings.Fields(rest)[0]
}

func TestEndToEndKV(t *testing.T) {
	addr := startKVServe(t)
	env := cleanEnv()
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return xferRun(t, env, append([]string{"kv"}, args...)...)
	}
	if _, e, code := run("put", "--server-addr", "http://"+addr, "mykey", "hello world"); code != 0 {
		t.Fatalf("put: exit %d: %s", code, e)
	}
	if o, e, code := run("get", "--server-addr", addr, "mykey"); code != 0 || o != "hello world" {
		t.Fatalf("get: %q exit %d: %s", o, code, e)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	big := strings.Repeat("0123456789abcdef", 300<<10/16) // above the inline limit
	if err := os.WriteFile(in, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run("put", "--server-addr", addr, "--requests", "grpc", "big", "--file", in); code != 0 {
		t.Fatalf("put --file: exit %d: %s", code, e)
	}
	if _, e, code := run("get", "--server-addr", addr, "big", "--out", out); code != 0 {
		t.Fatalf("get --out: exit %d: %s", code, e)
	}
	if got, _ := os.ReadFile(out); string(got) != big {
		t.Fatalf("get --out wrote %d bytes, want %d", len(got), len(big))
	}
	// The get leased the value: a delete needs --force.
	if _, e, code := run("delete", "--server-addr", addr, "mykey"); code == 0 || !strings.Contains(e, "read lease") {
		t.Fatalf("delete of a value just read: exit %d: %s", code, e)
	}
	if _, e, code := run("delete", "--server-addr", addr, "--force", "mykey"); code != 0 {
		t.Fatalf("delete --force: exit %d: %s", code, e)
	}
	for _, args := range [][]string{{"get", "mykey"}, {"delete", "mykey"}} {
		if _, e, code := run(append(args, "--server-addr", addr)...); code == 0 || !strings.Contains(e, "not found") {
			t.Fatalf("%v of a missing key: exit %d, stderr %q", args, code, e)
		}
	}
	if _, e, code := run("put", "--server-addr", addr, "", "x"); code == 0 || !strings.Contains(e, "empty key") {
		t.Fatalf("put of an empty key: exit %d, stderr %q", code, e)
	}
	if _, e, code := run("get", "--server-addr", "https://"+addr, "k"); code == 0 || !strings.Contains(e, "TLS") {
		t.Fatalf("https address: exit %d, stderr %q", code, e)
	}
	o, e, code := run("stats", "--server-addr", addr, "--json")
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, e)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(o), &st); err != nil || st["keys"] != 1.0 {
		t.Fatalf("stats: %v %s", err, o)
	}
	for _, op := range []string{"put", "get"} {
		o, e, code := run("bench", "--server-addr", addr, "--op", op, "--ops", "300", "--value-size", "64KiB", "--concurrency", "4", "--keys", "10", "--verify", "--json")
		if code != 0 {
			t.Fatalf("bench %s: exit %d: %s", op, code, e)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(o), &m); err != nil {
			t.Fatalf("bench %s: %v: %s", op, err, o)
		}
		for _, f := range []string{"ops_per_sec", "bytes_per_sec", "lat_p50_ns", "lat_p99_ns", "lat_p999_ns"} {
			if v, ok := m[f].(float64); !ok || v <= 0 {
				t.Errorf("bench %s: %s = %v", op, f, m[f])
			}
		}
		if p99, p999 := m["lat_p99_ns"].(float64), m["lat_p999_ns"].(float64); p999 < p99 {
			t.Errorf("bench %s: p99.9 %v below p99 %v", op, p999, p99)
		}
		if m["ops"] != 300.0 || m["op"] != op || m["clients"] != 4.0 {
			t.Errorf("bench %s: %s", op, o)
		}
	}
	// Four workers sharing one client: their requests share a connection.
	o, e, code = run("bench", "--server-addr", addr, "--op", "get", "--ops", "300", "--value-size", "64KiB", "--concurrency", "4", "--clients", "1", "--keys", "10", "--verify", "--json")
	if code != 0 {
		t.Fatalf("bench --clients 1: exit %d: %s", code, e)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(o), &m); err != nil || m["clients"] != 1.0 || m["concurrency"] != 4.0 || m["verified"] != true {
		t.Fatalf("bench --clients 1: %v: %s", err, o)
	}
	if _, e, code := run("bench", "--server-addr", addr, "--concurrency", "2", "--clients", "3"); code == 0 || !strings.Contains(e, "--clients 3: must be between 1 and --concurrency (2)") {
		t.Errorf("--clients above --concurrency: exit %d: %s", code, e)
	}
}

func TestKVServeBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "serve", "--full", "sometimes"}, "evict or reject"},
		{[]string{"kv", "serve", "--transport", "rdma", "--devices", "2", "--listen", "127.0.0.1:0"}, "RDMA devices"},
		{[]string{"kv", "bench", "--op", "scan"}, "get or put"},
		{[]string{"kv", "get", "k", "--server-addr", "nohostport"}, "HOST:PORT"},
	} {
		_, e, code := xferRun(t, cleanEnv(), tc.args...)
		if code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, e, tc.want)
		}
	}
}

// TestKVClientErrors: the client commands name the cause of a failure at
// once, and the fix where there is one.
func TestKVClientErrors(t *testing.T) {
	env := cleanEnv()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()

	start := time.Now()
	_, e, code := xferRun(t, env, "kv", "get", "--server-addr", closed, "k")
	if took := time.Since(start); code != 1 || !strings.Contains(e, "connection refused") || !strings.Contains(e, closed) || took > 5*time.Second {
		t.Fatalf("get from %s (nothing listens): exit %d after %v: %q; want exit 1 naming connection refused at once", closed, code, took, e)
	}
	if !strings.Contains(e, "--wait") {
		t.Errorf("the refused dial does not name --wait: %q", e)
	}
	// With --wait it tries until then, and still names the cause.
	_, e, code = xferRun(t, env, "kv", "stats", "--server-addr", closed, "--wait", "500ms")
	if code != 1 || !strings.Contains(e, "connection refused") || !strings.Contains(e, "within") {
		t.Fatalf("stats --wait 500ms: exit %d: %q", code, e)
	}

	// The server is up, but the data plane cannot use rdma here: that is
	// said at once, not as a missing server.
	addr := startKVServe(t, "--transport", "tcp")
	start = time.Now()
	_, e, code = xferRun(t, env, "kv", "get", "--server-addr", addr, "--transport", "rdma", "k")
	if took := time.Since(start); code != 1 || strings.Contains(e, "no KV server") || took > 20*time.Second {
		t.Fatalf("get --transport rdma against a tcp server: exit %d after %v: %q", code, took, e)
	}

	// A value larger than --buffer-mb: get grows its buffer as put does.
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	big := strings.Repeat("xfer", 3<<20/4)
	if err := os.WriteFile(in, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := xferRun(t, env, "kv", "put", "--server-addr", addr, "--buffer-mb", "1", "big", "--file", in); code != 0 {
		t.Fatalf("put 3 MiB with --buffer-mb 1: exit %d: %s", code, e)
	}
	o, e, code := xferRun(t, env, "kv", "get", "--server-addr", addr, "--buffer-mb", "1", "big", "--out", "-")
	if code != 0 || o != big {
		t.Fatalf("get 3 MiB with --buffer-mb 1 to stdout: exit %d, %d bytes: %s", code, len(o), e)
	}
}

// TestKVSemanticFlags: kv serve refuses lease, pin and eviction flags out
// of range; kv put pins, kv delete forces, and --replicas needs a cluster.
func TestKVSemanticFlags(t *testing.T) {
	env := cleanEnv()
	for _, args := range [][]string{
		{"--high-watermark", "1.5"},
		{"--eviction-ratio", "-0.5"},
		{"--soft-pin-ttl", "2h", "--max-soft-pin-ttl", "1h"},
		{"--lease-ttl", "-1s"},
	} {
		_, e, code := xferRun(t, env, append([]string{"kv", "serve", "--listen", "127.0.0.1:0", "--memory-mb", "8"}, args...)...)
		if code == 0 || !strings.Contains(e, args[0]) {
			t.Errorf("kv serve %v: exit %d: %s", args, code, e)
		}
	}
	addr := startKVServe(t, "--lease-ttl", "0", "--max-soft-pin-ttl", "1h")
	run := func(args ...string) (string, int) {
		t.Helper()
		_, e, code := xferRun(t, env, append([]string{"kv"}, append(args, "--server-addr", addr)...)...)
		return e, code
	}
	for _, args := range [][]string{
		{"put", "--soft-pin-ttl", "30m", "k1", "v"},
		{"put", "--soft-pin", "k2", "v"},
		{"put", "--hard-pin", "k3", "v"},
		{"get", "k1"},
		{"delete", "k1"}, // no leases
	} {
		if e, code := run(args...); code != 0 {
			t.Errorf("kv %v: exit %d: %s", args, code, e)
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"put", "--soft-pin-ttl", "2h", "k4", "v"}, "longer than the server's maximum"},
		{[]string{"put", "--soft-pin-ttl", "-1m", "k4", "v"}, "must be positive"},
		{[]string{"put", "--soft-pin", "--hard-pin", "k4", "v"}, "not both"},
		{[]string{"put", "--replicas", "2", "k4", "v"}, "--replicas needs --directory"},
	} {
		if e, code := run(c.args...); code == 0 || !strings.Contains(e, c.msg) {
			t.Errorf("kv %v: exit %d: %s, want %q", c.args, code, e, c.msg)
		}
	}
}

// TestKVServeDiskTier: kv serve with --disk-dir and --disk-size (or the
// config's kv.disk_dir and kv.disk_size, here from the environment) has a
// disk tier, which kv stats shows; a disk tier without a size, or a size
// without a directory, is refused with what to add.
func TestKVServeDiskTier(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "serve", "--listen", "127.0.0.1:0", "--disk-dir", t.TempDir()}, "needs --disk-size"},
		{[]string{"kv", "serve", "--listen", "127.0.0.1:0", "--disk-size", "1GiB"}, "without --disk-dir"},
		{[]string{"kv", "serve", "--listen", "127.0.0.1:0", "--disk-dir", t.TempDir(), "--disk-size", "4KiB"}, "too small"},
	} {
		_, e, code := xferRun(t, cleanEnv(), tc.args...)
		if code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, e, tc.want)
		}
	}
	dir := t.TempDir()
	for _, how := range []string{"flags", "env"} {
		var addr string
		var env []string
		if how == "flags" {
			addr = startKVServe(t, "--disk-dir", dir, "--disk-size", "16MiB")
			env = cleanEnv()
		} else {
			env = cleanEnv(envPrefix+"KV_DISK_DIR="+t.TempDir(), envPrefix+"KV_DISK_SIZE=16MiB")
			addr = startKVServeEnv(t, env)
		}
		if _, e, code := xferRun(t, env, "kv", "put", "--server-addr", addr, "k", "v"); code != 0 {
			t.Fatalf("%s: put: exit %d: %s", how, code, e)
		}
		o, e, code := xferRun(t, env, "kv", "stats", "--server-addr", addr, "--json")
		if code != 0 {
			t.Fatalf("%s: stats: exit %d: %s", how, code, e)
		}
		var st struct {
			Disk *struct {
				Capacity uint64 `json:"capacity"`
			} `json:"disk"`
		}
		if err := json.Unmarshal([]byte(o), &st); err != nil || st.Disk == nil || st.Disk.Capacity == 0 {
			t.Fatalf("%s: stats %s: %v; want a disk tier", how, o, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "xfer-kv.tier")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the tier's file: %v, %v; want it, 0600", fi, err)
	}
}

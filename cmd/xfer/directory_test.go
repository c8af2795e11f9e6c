package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/kv"
)

// TestKVDirectory: two `xfer kv serve` register in an embedded etcd; the
// client commands given --directory spread keys over both, find them
// again, and reach one server by --peer-node.
func TestKVDirectory(t *testing.T) {
	url := "etcd://" + etcdtest.Start(t) + "/kvcli"
	env := cleanEnv()
	startKVServe(t, "--transport", "tcp", "--directory", url, "--node-id", "kv-a", "--directory-ttl", "2s")
	startKVServe(t, "--transport", "tcp", "--directory", url, "--node-id", "kv-b", "--directory-ttl", "2s")
	const n = 24
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if _, e, code := xferRun(t, env, "kv", "put", "--directory", url, "--transport", "tcp", k, "v"+k); code != 0 {
			t.Fatalf("put %s: exit %d: %s", k, code, e)
		}
	}
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if o, e, code := xferRun(t, env, "kv", "get", "--directory", url, "--transport", "tcp", k); code != 0 || o != "v"+k {
			t.Fatalf("get %s: exit %d, %q: %s", k, code, o, e)
		}
	}
	o, e, code := xferRun(t, env, "kv", "stats", "--directory", url, "--json")
	if code != 0 {
		t.Fatalf("stats: exit %d: %s", code, e)
	}
	var st map[string]kv.Stats
	if err := json.Unmarshal([]byte(o), &st); err != nil {
		t.Fatalf("%v: %s", err, o)
	}
	if len(st) != 2 || st["kv-a"].Keys == 0 || st["kv-b"].Keys == 0 || st["kv-a"].Keys+st["kv-b"].Keys != n {
		t.Fatalf("stats %+v: want the %d keys spread over kv-a and kv-b", st, n)
	}
	// One server by node ID: it holds only its share.
	o, e, code = xferRun(t, env, "kv", "stats", "--directory", url, "--peer-node", "kv-a", "--json")
	var one kv.Stats
	if code != 0 || json.Unmarshal([]byte(o), &one) != nil || one.Keys != st["kv-a"].Keys {
		t.Fatalf("stats --peer-node kv-a: exit %d, %s: %s", code, o, e)
	}
	if o, e, code = xferRun(t, env, "kv", "bench", "--directory", url, "--transport", "tcp", "--ops", "300", "--keys", "30", "--concurrency", "2", "--json"); code != 0 {
		t.Fatalf("bench: exit %d: %s", code, e)
	}
	var rec bench.KVResult
	if err := json.Unmarshal([]byte(o), &rec); err != nil || rec.Ops != 300 {
		t.Fatalf("bench printed %q (%v)", o, err)
	}
	if _, e, code = xferRun(t, env, "kv", "get", "--directory", url, "--peer-node", "kv-c", "k0"); code == 0 || !strings.Contains(e, "not found") {
		t.Fatalf("get from an unknown node: exit %d: %s", code, e)
	}
}

// TestServeBenchByNode: xfer serve registers in a coordinator and xfer
// bench finds it by node ID.
func TestServeBenchByNode(t *testing.T) {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	startServe(t, "--transport", "tcp", "--directory", coord.URL, "--node-id", "target-1")
	o, e, code := xferRun(t, cleanEnv(), "bench", "--directory", coord.URL, "--peer-node", "target-1", "--transport", "tcp", "--size", "4KiB", "--iters", "200", "--json")
	if code != 0 || !strings.Contains(o, `"transport":"tcp"`) {
		t.Fatalf("bench --peer-node: exit %d, %s: %s", code, o, e)
	}
	if _, e, code = xferRun(t, cleanEnv(), "bench", "--directory", coord.URL, "--peer-node", "nobody", "--iters", "10"); code == 0 || !strings.Contains(e, "unknown node") {
		t.Fatalf("bench of an unknown node: exit %d: %s", code, e)
	}
}

// TestDirectoryFlags: --peer-node without --directory, and the other
// inconsistent combinations, are errors that say what to give.
func TestDirectoryFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--peer-node", "n"}, "--peer-node needs --directory"},
		{[]string{"bench", "--peer", "h:1", "--peer-node", "n", "--directory", "http://127.0.0.1:1"}, "give one"},
		{[]string{"kv", "get", "--peer-node", "n", "k"}, "--peer-node needs --directory"},
		{[]string{"kv", "bench", "--peer-node", "n"}, "--peer-node needs --directory"},
		{[]string{"kv", "get", "--directory", "http://127.0.0.1:1", "--server-addr", "h:1", "k"}, "give one"},
		{[]string{"pages", "bench", "--peer-node", "n"}, "--directory"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--node-id", "n"}, "needs a directory"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--node-id", "a b", "--directory", "http://127.0.0.1:1"}, `node_id "a b"`},
		{[]string{"kv", "serve", "--listen", "127.0.0.1:0", "--node-id", "n"}, "needs a directory"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--directory", "zk://h"}, `directory "zk://h"`},
	} {
		var errb strings.Builder
		if code := run(context.Background(), tc.args, io.Discard, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error mentioning %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// startDaemon runs the xfer binary with args until the test ends and
// returns the rest of the first line it prints after banner.
func startDaemon(t *testing.T, banner string, args ...string) string {
	t.Helper()
	_, rest := startProcess(t, banner, args...)
	return rest
}

// startProcess is startDaemon that returns the process too.
func startProcess(t *testing.T, banner string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(xferBinary(t), args...)
	cmd.Env = cleanEnv()
	cmd.Stderr = os.Stderr
	line := testutil.StartProcess(t, cmd)
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), banner)
	if !ok {
		t.Fatalf("xfer %s printed %q", strings.Join(args, " "), line)
	}
	return cmd, rest
}

// TestREADMETwoNodes runs the README's two-node block on loopback: once
// through the coordinator it starts, once through an etcd in its place.
// Addresses become loopback ones, the address space 8 MiB, and the runs
// short; the commands are otherwise the README's.
func TestREADMETwoNodes(t *testing.T) {
	var block []string
	for _, b := range readmeBlocks(t, "sh") {
		if slices.Contains(b, "xfer coordinator --listen :7470") {
			block = b
		}
	}
	if block == nil {
		t.Fatal("the README has no sh block with xfer coordinator --listen :7470")
	}
	const readmeURL = "http://10.0.0.5:7470"
	for _, backend := range []string{"coordinator", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			var url string
			ran := 0
			for _, l := range block {
				l, _, _ = strings.Cut(l, "#")
				f := strings.Fields(l)
				if len(f) < 2 || f[0] != "xfer" {
					continue
				}
				args := f[1:]
				if args[0] == "coordinator" {
					if backend == "coordinator" {
						url = "http://" + startDaemon(t, coordinatorBanner, "coordinator", "--listen", "127.0.0.1:0")
					} else {
						url = "etcd://" + etcdtest.Start(t) + "/xfer"
					}
					continue
				}
				for i, a := range args {
					switch {
					case a == readmeURL:
						args[i] = url
					case strings.HasPrefix(a, "10.0.0.1:"):
						args[i] = "127.0.0.1:0"
					case a == "1GiB":
						args[i] = "8MiB"
					}
				}
				if !slices.Contains(args, url) {
					t.Fatalf("xfer %s: does not name the directory %s", l, readmeURL)
				}
				args = append(args, "--transport", "tcp")
				switch strings.Join(args[:2], " ") {
				case "pages serve":
					startDaemon(t, pagesBanner, args...)
				case "serve --listen":
					startDaemon(t, serveBanner, args...)
				case "pages bench":
					ran++
					if o, e, code := xferRun(t, cleanEnv(), append(args, "--duration", "200ms", "--json")...); code != 0 || !strings.Contains(o, `"transport":"tcp"`) {
						t.Fatalf("xfer %s: exit %d, %s: %s", strings.Join(args, " "), code, o, e)
					}
				default:
					if args[0] != "bench" {
						t.Fatalf("the block runs xfer %s, which this test does not know", l)
					}
					ran++
					if o, e, code := xferRun(t, cleanEnv(), append(args, "--iters", "200", "--json")...); code != 0 || !strings.Contains(o, `"transport":"tcp"`) {
						t.Fatalf("xfer %s: exit %d, %s: %s", strings.Join(args, " "), code, o, e)
					}
				}
			}
			if ran != 2 {
				t.Fatalf("ran %d clients of the block, want pages bench and bench", ran)
			}
		})
	}
}

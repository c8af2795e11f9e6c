package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xferio/xfer/directory"
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
	var rec kvBenchRecord
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

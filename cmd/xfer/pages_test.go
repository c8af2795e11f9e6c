package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/directory"
)

// startPagesServe runs `xfer pages serve args...` in this process until the
// test ends, and returns its address.
func startPagesServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, append([]string{"pages", "serve", "--listen", "127.0.0.1:0", "--transport", "tcp"}, args...), pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("pages serve exited %d", code)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), pagesBanner)
	if !ok {
		t.Fatalf("first line %q", line)
	}
	return addr
}

func TestPagesCommands(t *testing.T) {
	addr := startPagesServe(t, "--size", "8MiB", "--stamp")
	for _, depth := range []string{"1", "16"} {
		var out, errb strings.Builder
		code := run(context.Background(), []string{"pages", "bench", "--peer", addr, "--transport", "tcp", "--duration", "200ms", "--depth", depth, "--verify", "--json"}, &out, &errb)
		if code != 0 {
			t.Fatalf("pages bench --depth %s: exit %d: %s", depth, code, errb.String())
		}
		var r bench.PagesResult
		if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if r.Pages == 0 || r.P50us <= 0 || r.P99us < r.P50us || r.P999us < r.P99us || !r.Verified || r.Transport != "tcp" {
			t.Fatalf("depth %s: %+v", depth, r)
		}
	}
	// Without --stamp, --verify fails and says why.
	bare := startPagesServe(t, "--size", "1MiB")
	// More pages than the server's 256 is an error naming both numbers,
	// not a bench of 256 pages that says nothing.
	var big strings.Builder
	if code := run(context.Background(), []string{"pages", "bench", "--peer", bare, "--transport", "tcp", "--duration", "100ms", "--pages", "1000000"}, io.Discard, &big); code == 0 ||
		!strings.Contains(big.String(), "--pages 1000000") || !strings.Contains(big.String(), "only 256 pages") {
		t.Fatalf("--pages 1000000 against 256 pages: exit %d: %s", code, big.String())
	}
	var errb strings.Builder
	if code := run(context.Background(), []string{"pages", "bench", "--peer", bare, "--transport", "tcp", "--duration", "100ms", "--verify"}, io.Discard, &errb); code == 0 || !strings.Contains(errb.String(), "--stamp") {
		t.Fatalf("verify against an unstamped server: exit %d: %s", code, errb.String())
	}
}

// TestPagesDirectory: a page server registers in a coordinator, and bench
// finds it by node ID.
func TestPagesDirectory(t *testing.T) {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	startPagesServe(t, "--size", "1MiB", "--stamp", "--directory", coord.URL, "--node-id", "mem-1")
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"pages", "bench", "--directory", coord.URL, "--peer-node", "mem-1", "--transport", "tcp", "--duration", "100ms", "--verify"}, &out, &errb); code != 0 {
		t.Fatalf("bench by node ID: exit %d: %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"pages", "bench", "--directory", coord.URL, "--peer-node", "mem-2", "--duration", "100ms"}, io.Discard, &errb); code == 0 || !strings.Contains(errb.String(), "not found") {
		t.Fatalf("bench of an unknown node: exit %d: %s", code, errb.String())
	}
}

func TestPagesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pages", "serve"}, "--listen"},
		{[]string{"pages", "serve", "--listen", ":0", "--size", "5000"}, "multiple of the page size"},
		{[]string{"pages", "serve", "--listen", ":0", "--page-size", "8KiB"}, "4KiB or 2MiB"},
		{[]string{"pages", "serve", "--listen", ":0", "--node-id", "x"}, "needs a directory"},
		{[]string{"pages", "serve", "--listen", ":0", "--directory", "http://127.0.0.1:1"}, "--directory needs --node-id"},
		{[]string{"pages", "bench"}, "needs a server"},
		{[]string{"pages", "bench", "--peer", "h:1", "--peer-node", "n"}, "give one"},
		{[]string{"pages", "bench", "--peer-node", "n"}, "--directory"},
		{[]string{"pages", "bench", "--peer", "h:1", "--pattern", "zigzag"}, "random or seq"},
		{[]string{"pages", "bench", "--peer", "h:1", "--depth", "0"}, "--depth"},
		{[]string{"pages", "frobnicate"}, "unknown command"},
	} {
		var errb strings.Builder
		if code := run(context.Background(), tc.args, io.Discard, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want an error mentioning %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

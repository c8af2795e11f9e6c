package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// TestKVBenchServerStops: a kv bench whose server is stopped (SIGSTOP) or
// killed (SIGKILL) mid-run exits non-zero within its call bound (3 ×
// --op-timeout), with an error that names the server and says it stalled
// or is gone, instead of waiting for it forever.
func TestKVBenchServerStops(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want string
	}{{syscall.SIGSTOP, "stalled"}, {syscall.SIGKILL, "gone"}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			srv, addr := startStoppable(t, kvBanner, "kv", "serve", "--listen", "127.0.0.1:0", "--memory-mb", "64")
			benchUntilStopped(t, srv, tc.sig, []string{addr, tc.want}, "kv", "bench", "--server-addr", addr, "--op", "get", "--value-size", "1MiB",
				"--keys", "8", "--ops", "100000000", "--op-timeout", "1s")
		})
	}
}

// TestPagesBenchServerStops: a pages bench, one fetch at a time or a
// pipeline of them, whose server is stopped or killed mid-run exits
// non-zero within its --op-timeout, naming the server.
func TestPagesBenchServerStops(t *testing.T) {
	for _, tc := range []struct {
		sig   syscall.Signal
		depth string
		want  string
	}{{syscall.SIGSTOP, "1", "op_timeout"}, {syscall.SIGSTOP, "8", "op_timeout"}, {syscall.SIGKILL, "8", ""}} {
		t.Run(tc.sig.String()+"/depth"+tc.depth, func(t *testing.T) {
			srv, addr := startStoppable(t, pagesBanner, "pages", "serve", "--listen", "127.0.0.1:0", "--transport", "tcp", "--size", "64MiB")
			benchUntilStopped(t, srv, tc.sig, []string{addr, tc.want}, "pages", "bench", "--peer", addr, "--transport", "tcp", "--depth", tc.depth,
				"--duration", "120s", "--op-timeout", "1s")
		})
	}
}

// startStoppable starts the xfer server that args run, which announces
// its address after banner, and returns it with that address. The test's
// end continues it (SIGCONT) before it is stopped.
func startStoppable(t *testing.T, banner string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	srv := exec.Command(xferBinary(t), args...)
	srv.Env = cleanEnv()
	srv.Stderr = os.Stderr
	rest, ok := strings.CutPrefix(strings.TrimSpace(testutil.StartProcess(t, srv)), banner)
	if !ok {
		t.Fatalf("xfer %s did not announce its address: %q", strings.Join(args, " "), rest)
	}
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGCONT) }) // before StartProcess stops it
	return srv, strings.Fields(rest)[0]
}

// benchFails waits for bench, which must fail within d after its peer
// went (what says how); else it kills it and fails the test. stderr is
// the bench's.
func benchFails(t *testing.T, bench *exec.Cmd, d time.Duration, what string, stderr fmt.Stringer) {
	t.Helper()
	stopped := time.Now()
	done := make(chan error, 1)
	go func() { done <- bench.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the bench succeeded after %s: %s", what, stderr)
		}
		t.Logf("the bench failed %v after %s: %s", time.Since(stopped).Round(time.Millisecond), what, stderr)
	case <-time.After(d):
		bench.Process.Kill()
		<-done
		t.Fatalf("the bench still runs %v after %s, with --op-timeout 1s: %s", d, what, stderr)
	}
}

// benchUntilStopped runs the xfer bench that args run, sends sig to its
// server srv once it is under way, and requires the bench to fail within
// a minute with an error that says each of want.
func benchUntilStopped(t *testing.T, srv *exec.Cmd, sig syscall.Signal, want []string, args ...string) {
	t.Helper()
	bench := exec.Command(xferBinary(t), args...)
	bench.Env = cleanEnv()
	var stderr bytes.Buffer
	bench.Stderr = &stderr
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the bench is under way
	if sig == syscall.SIGSTOP {
		testutil.Pause(t, srv.Process)
	} else if err := srv.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	benchFails(t, bench, 60*time.Second, fmt.Sprintf("its server got %v", sig), &stderr)
	for _, w := range want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("the bench's error does not say %q: %s", w, stderr.String())
		}
	}
}

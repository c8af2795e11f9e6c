package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// TestKVBenchServerStops: a kv bench (GET, 4 clients) whose server is
// killed (SIGKILL) mid-run exits non-zero within the reconnect_wait of
// 2 s, saying the server is gone; one whose server is stopped (SIGSTOP)
// exits within --op-timeout, saying it stalled; over tcp and shm. With
// --call-timeout, the opt-in bound that rides through a restart, a
// stopped server fails the bench at that bound instead.
func TestKVBenchServerStops(t *testing.T) {
	const opTimeout = 3 * time.Second
	for _, tc := range []struct {
		transport string
		sig       syscall.Signal
		within    time.Duration
		want      []string
		extra     []string
	}{
		{"tcp", syscall.SIGKILL, xfer.DefaultReconnectWait, []string{"gone", "refused", "reconnect_wait"}, nil},
		{"shm", syscall.SIGKILL, xfer.DefaultReconnectWait, []string{"gone", "refused", "reconnect_wait"}, nil},
		{"tcp", syscall.SIGSTOP, opTimeout, []string{"stalled", "op_timeout"}, nil},
		{"shm", syscall.SIGSTOP, opTimeout, []string{"stalled", "op_timeout"}, nil},
		{"tcp", syscall.SIGSTOP, 5 * time.Second, []string{"stalled", "call_timeout"}, []string{"--call-timeout", "5s"}},
	} {
		name := tc.transport + "/" + tc.sig.String()
		if tc.extra != nil {
			name += "/call-timeout"
		}
		t.Run(name, func(t *testing.T) {
			srv, addr := startStoppable(t, kvBanner, "kv", "serve", "--listen", "127.0.0.1:0", "--memory-mb", "64", "--transport", tc.transport)
			args := append([]string{"kv", "bench", "--server-addr", addr, "--transport", tc.transport, "--op", "get", "--value-size", "1MiB",
				"--keys", "8", "--concurrency", "4", "--ops", "100000000", "--op-timeout", opTimeout.String()}, tc.extra...)
			benchUntilStopped(t, srv, tc.sig, tc.within, append([]string{addr}, tc.want...), args...)
		})
	}
}

// TestPagesBenchServerStops: a pages bench, one fetch at a time or a
// pipeline of them, whose server is stopped exits non-zero within its
// --op-timeout, and one whose server is killed within the reconnect_wait
// of 2 s, naming the server.
func TestPagesBenchServerStops(t *testing.T) {
	for _, tc := range []struct {
		sig    syscall.Signal
		depth  string
		within time.Duration
		want   string
	}{{syscall.SIGSTOP, "1", time.Second, "op_timeout"}, {syscall.SIGSTOP, "8", time.Second, "op_timeout"}, {syscall.SIGKILL, "8", xfer.DefaultReconnectWait, "reconnect_wait"}} {
		t.Run(tc.sig.String()+"/depth"+tc.depth, func(t *testing.T) {
			srv, addr := startStoppable(t, pagesBanner, "pages", "serve", "--listen", "127.0.0.1:0", "--transport", "tcp", "--size", "64MiB")
			benchUntilStopped(t, srv, tc.sig, tc.within, []string{addr, tc.want}, "pages", "bench", "--peer", addr, "--transport", "tcp", "--depth", tc.depth,
				"--duration", "120s", "--op-timeout", "1s")
		})
	}
}

// startStoppable starts the xfer server that args run, which announces
// its address after banner, and returns it with that address. The test's
// end continues it (SIGCONT) before it is stopped.
func startStoppable(t *testing.T, banner string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	srv, rest := startProcess(t, banner, args...)
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGCONT) }) // before StartProcess stops it
	return srv, strings.Fields(rest)[0]
}

// benchFails waits for bench, which must fail within d after its peer
// went (what says how), and a little more for the process to start its
// exit; else it kills it and fails the test. stderr is the bench's.
func benchFails(t *testing.T, bench *exec.Cmd, d time.Duration, what string, stderr fmt.Stringer) {
	t.Helper()
	stopped := time.Now()
	done := make(chan error, 1)
	go func() { done <- bench.Wait() }()
	select {
	case err := <-done:
		took := time.Since(stopped)
		if err == nil {
			t.Fatalf("the bench succeeded after %s: %s", what, stderr)
		}
		t.Logf("the bench failed %v after %s: %s", took.Round(time.Millisecond), what, stderr)
		if took > d+benchSlack {
			t.Errorf("the bench failed %v after %s; want within %v", took.Round(time.Millisecond), what, d)
		}
	case <-time.After(d + 30*time.Second):
		bench.Process.Kill()
		<-done
		t.Fatalf("the bench still runs %v after %s, to fail within %v: %s", d+30*time.Second, what, d, stderr)
	}
}

// benchSlack is what a bench may take beyond its bound to fail: the
// signal to reach the server and the process to exit.
const benchSlack = 700 * time.Millisecond

// benchUntilStopped runs the xfer bench that args run, sends sig to its
// server srv once it is under way, and requires the bench to fail within
// d (benchFails) with an error that says each of want.
func benchUntilStopped(t *testing.T, srv *exec.Cmd, sig syscall.Signal, d time.Duration, want []string, args ...string) {
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
	benchFails(t, bench, d, fmt.Sprintf("its server got %v", sig), &stderr)
	for _, w := range want {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("the bench's error does not say %q: %s", w, stderr.String())
		}
	}
}

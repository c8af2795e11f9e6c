package kv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// TestServerGoneFailsFast: a server that is gone (its listener and
// connections closed: its address refuses) fails each call after the
// client engine's reconnect_wait, not after op_timeout, with a *DownError
// that names the server, says it refused, and how long the client tried;
// once it is known to be down, a call fails after one attempt. On both
// request paths, with the default options.
func TestServerGoneFailsFast(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t, ServerOptions{})
			c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16, OpTimeout: time.Minute}, Requests: mode})
			if c.callTimeout != time.Minute {
				t.Fatalf("call bound %v, want op_timeout", c.callTimeout)
			}
			ctx := context.Background()
			if err := c.Put(ctx, "k", pattern(100<<10, 1)); err != nil {
				t.Fatal(err)
			}
			s.stop()
			calls := []struct {
				op   string
				call func() error
			}{
				{"get", func() error { _, err := c.Get(ctx, "k"); return err }},
				{"put", func() error { return c.Put(ctx, "k", pattern(100<<10, 2)) }},
				{"delete", func() error { return c.Delete(ctx, "k") }},
				{"stats", func() error { _, err := c.Stats(ctx); return err }},
			}
			for i, tc := range calls {
				limit := xfer.DefaultReconnectWait + 3*time.Second
				if i > 0 {
					limit = time.Second // known to be down
				}
				start := time.Now()
				err := testutil.EndsWithin(t, limit, tc.call)
				var de *DownError
				if !errors.As(err, &de) || !errors.Is(err, ErrUnavailable) || errors.Is(err, xfer.ErrStalled) || de.Op != tc.op {
					t.Fatalf("%s from a server that is gone, after %v: %v; want a *DownError of %s matching ErrUnavailable", tc.op, time.Since(start), err, tc.op)
				}
				for _, want := range []string{s.addr, "gone", "reconnect_wait 2s"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: the error does not say %q: %v", tc.op, want, err)
					}
				}
				if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("%s: %v: want it to match ECONNREFUSED or ECONNRESET", tc.op, err)
				}
				if i == 0 && (de.Tried < xfer.DefaultReconnectWait*3/4 || de.Tried > xfer.DefaultReconnectWait) {
					t.Errorf("%s: gave up after trying for %v; want most of reconnect_wait, and no more", tc.op, de.Tried)
				}
			}
		})
	}
}

// TestCallTimeoutRidesThrough: with CallTimeout set, a call waits for a
// server that is gone up to that bound, then fails with a *StalledError
// that names the server, says it is gone and names call_timeout; on both
// request paths.
func TestCallTimeoutRidesThrough(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t, ServerOptions{})
			c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, Requests: mode, CallTimeout: 3 * time.Second})
			ctx := context.Background()
			if err := c.Put(ctx, "k", pattern(100<<10, 1)); err != nil {
				t.Fatal(err)
			}
			s.stop()
			start := time.Now()
			_, err := c.Get(ctx, "k")
			took := time.Since(start)
			var se *StalledError
			if !errors.As(err, &se) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, os.ErrDeadlineExceeded) || se.Op != "get" {
				t.Fatalf("get from a server that is gone, riding through: %v; want a *StalledError matching ErrUnavailable", err)
			}
			for _, want := range []string{s.addr, "gone", "call_timeout"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if took < 3*time.Second*7/8 || took > 3*time.Second+2*time.Second {
				t.Errorf("failed after %v; want about the call bound of 3s", took)
			}
		})
	}
}

// TestCallBoundContextWins: a context's deadline, not the call bound,
// bounds a call that has one; the call bound is op_timeout by default, and
// a negative CallTimeout turns it off.
func TestCallBoundContextWins(t *testing.T) {
	s := startServer(t, ServerOptions{})
	c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, CallTimeout: -1})
	if c.callTimeout != 0 || !c.rideThrough {
		t.Fatalf("CallTimeout -1: bound %v, riding through %v; want none, riding through", c.callTimeout, c.rideThrough)
	}
	d := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16, OpTimeout: 2 * time.Second}})
	if d.callTimeout != 2*time.Second || d.rideThrough {
		t.Fatalf("op_timeout 2s: bound %v, riding through %v; want 2s, failing fast", d.callTimeout, d.rideThrough)
	}
	s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := testutil.EndsWithin(t, 30*time.Second, func() error { _, err := d.Get(ctx, "x"); return err })
	var se *StalledError
	if errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a deadline from a server that is gone: %v; want the context's error", err)
	}
}

// serverProcEnv runs the test binary as a KV server (serverProc).
const serverProcEnv = "XFER_KV_SERVER"

// serverProcess is the test binary as a KV server process over the
// transport policy: it prints its address, then serves until killed.
func serverProcess(policy string) error {
	ctx := context.Background()
	s, err := NewServer(ctx, ServerOptions{Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.Policy(policy), MemoryMB: 16}})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(lis.Addr().String())
	return s.Serve(ctx, lis)
}

// serverProc starts a KV server in a process of its own (serverProcess)
// and returns it with its address; the test's end continues it and stops
// it.
func serverProc(t *testing.T, policy xfer.Policy) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverProcEnv+"="+string(policy))
	cmd.Stderr = os.Stderr
	addr := testutil.StartProcess(t, cmd)
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT) }) // before StartProcess stops it
	return cmd, addr
}

// TestServerProcessGoneOrStopped: a KV server that is a process of its
// own, killed (SIGKILL) under a client's GETs, fails them within the
// reconnect_wait of 2 s and a little; stopped (SIGSTOP), it fails them
// within op_timeout; over tcp and shm, on both request paths.
func TestServerProcessGoneOrStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("server processes killed and stopped: skipped in -short mode")
	}
	const opTimeout = 3 * time.Second
	for _, tr := range transports {
		for _, mode := range modes {
			for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
				t.Run(fmt.Sprintf("%s/%s/%v", tr, mode, sig), func(t *testing.T) {
					srv, addr := serverProc(t, tr)
					c := dialOpts(t, addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: 16, OpTimeout: opTimeout}, Requests: mode})
					ctx := context.Background()
					if err := c.Put(ctx, "k", pattern(256<<10, 1)); err != nil {
						t.Fatal(err)
					}
					errc := make(chan error, 1)
					go func() {
						for {
							if _, err := c.Get(ctx, "k"); err != nil {
								errc <- err
								return
							}
						}
					}()
					time.Sleep(200 * time.Millisecond) // GETs under way
					limit := xfer.DefaultReconnectWait + 500*time.Millisecond
					if sig == syscall.SIGSTOP {
						testutil.Pause(t, srv.Process)
						limit = opTimeout + 500*time.Millisecond
					} else if err := srv.Process.Kill(); err != nil {
						t.Fatal(err)
					}
					start := time.Now()
					var err error
					select {
					case err = <-errc:
					case <-time.After(limit + 10*time.Second):
						t.Fatalf("GETs still run %v after the server got %v", time.Since(start), sig)
					}
					took := time.Since(start)
					if took > limit {
						t.Errorf("the GETs failed %v after the server got %v; want within %v", took, sig, limit)
					}
					want := "gone"
					if sig == syscall.SIGSTOP {
						want = "op_timeout"
						if !errors.Is(err, xfer.ErrStalled) {
							t.Errorf("a stopped server: %v; want it to match ErrStalled", err)
						}
					} else if !errors.Is(err, ErrUnavailable) {
						t.Errorf("a killed server: %v; want it to match ErrUnavailable", err)
					}
					if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), want) {
						t.Errorf("the error does not name %s and say %q: %v", addr, want, err)
					}
					t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
				})
			}
		}
	}
}

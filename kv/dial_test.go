package kv

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// TestDialRefusedFailFast: with FailFast, a port where nothing listens is
// an error at once that names the cause.
func TestDialRefusedFailFast(t *testing.T) {
	addr := closedPort(t)
	start := time.Now()
	_, err := Dial(context.Background(), addr, ClientOptions{EngineConfig: xfer.Config{MemoryMB: 4}, FailFast: true})
	took := time.Since(start)
	var de *DialError
	if !errors.As(err, &de) {
		t.Fatalf("dial %s: %v, want a *DialError", addr, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("dial %s: %v: does not match ECONNREFUSED and ErrUnavailable", addr, err)
	}
	if !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("dial %s: %q does not name the address and the cause", addr, err)
	}
	if de.Waited != 0 || took > 5*time.Second {
		t.Fatalf("fail-fast dial waited %v (took %v)", de.Waited, took)
	}
}

// TestDialWaitsWithCause: without FailFast, Dial tries again until its
// deadline, tells OnWait why each time, and its error names the last cause.
func TestDialWaitsWithCause(t *testing.T) {
	addr := closedPort(t)
	var waits atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, addr, ClientOptions{EngineConfig: xfer.Config{MemoryMB: 4}, OnWait: func(cause error) {
		if !errors.Is(cause, syscall.ECONNREFUSED) {
			t.Errorf("OnWait(%v): want connection refused", cause)
		}
		waits.Add(1)
	}})
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want a DialError with the deadline and connection refused", addr, err)
	}
	if !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "within") {
		t.Fatalf("dial: %q", err)
	}
	if waits.Load() < 2 || de.Attempts != int(waits.Load()) {
		t.Fatalf("OnWait called %d times for %d attempts; want one per attempt, at least 2", waits.Load(), de.Attempts)
	}
}

// TestDialDefaultTimeout: a context without a deadline gets DialTimeout,
// so Dial to a server that never comes does not block forever.
func TestDialDefaultTimeout(t *testing.T) {
	addr := closedPort(t)
	start := time.Now()
	_, err := Dial(context.Background(), addr, ClientOptions{EngineConfig: xfer.Config{MemoryMB: 4}, DialTimeout: 300 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial: %v, want the dial timeout and connection refused", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("dial took %v with a 300ms dial timeout", took)
	}
	if DefaultDialTimeout <= 0 {
		t.Fatal("no default dial timeout")
	}
}

// TestDialNotKV: something that accepts connections but does not speak
// gRPC is named as such.
func TestDialNotKV(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	_, err = Dial(context.Background(), lis.Addr().String(), ClientOptions{EngineConfig: xfer.Config{MemoryMB: 4}, FailFast: true})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "does not answer as a KV server") {
		t.Fatalf("dial a non-gRPC port: %v", err)
	}
}

// TestDialDataPlaneError: a server that answers but whose data plane the
// client cannot use is not reported as a missing server.
func TestDialDataPlaneError(t *testing.T) {
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Secret: "secret-aaaaaaaaaaaa"}})
	_, err := Dial(ctxT(t), s.addr, ClientOptions{EngineConfig: xfer.Config{MemoryMB: 4, Transport: xfer.PolicyTCP, Secret: "secret-bbbbbbbbbbbb"}})
	if err == nil {
		t.Fatal("dial with the wrong secret succeeded")
	}
	var de *DialError
	if errors.As(err, &de) || !errors.Is(err, xfer.ErrAuth) {
		t.Fatalf("dial with the wrong secret: %v, want ErrAuth and no DialError", err)
	}
}

// TestGetLargerThanPool: Get of a value larger than the client's whole
// buffer pool says so, with the size needed.
func TestGetLargerThanPool(t *testing.T) {
	s := startServer(t, ServerOptions{})
	big := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}})
	small := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1}})
	v := pattern(3<<20, 5)
	if err := big.Put(ctxT(t), "k", v); err != nil {
		t.Fatal(err)
	}
	_, err := small.Get(ctxT(t), "k")
	var tooSmall *BufferTooSmallError
	if !errors.As(err, &tooSmall) || !tooSmall.Pool || tooSmall.Needed != uint64(len(v)) {
		t.Fatalf("get of 3 MiB into a 1 MiB pool: %v, want a BufferTooSmallError of the pool", err)
	}
	if !strings.Contains(err.Error(), "MemoryMB") {
		t.Fatalf("%q does not say how to grow the pool", err)
	}
	if got, err := big.Get(ctxT(t), "k"); err != nil || len(got) != len(v) {
		t.Fatalf("get with a large pool: %d bytes, %v", len(got), err)
	}
}

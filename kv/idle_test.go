package kv

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// TestServerClosesIdleConnections: Serve closes a gRPC connection that has
// no RPC in flight for IdleTimeout, and one that never completes its
// handshake; a KV client whose connection was closed carries on.
func TestServerClosesIdleConnections(t *testing.T) {
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP}, IdleTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	conn, err := grpc.NewClient("passthrough:///"+s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := kvpb.NewKVClient(conn).Stats(ctx, &kvpb.StatsRequest{}); err != nil {
		t.Fatal(err)
	}
	// The server's GOAWAY sends the channel back to idle.
	for st := conn.GetState(); st != connectivity.Idle; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatalf("the idle connection is still %v", st)
		}
	}

	// A connection that never speaks gRPC is closed after the handshake
	// timeout (here the idle timeout, which is shorter).
	raw, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := raw.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("a connection that never completed its handshake is still open after 10 s")
			}
			break
		}
	}

	c := dial(t, s.addr, xfer.PolicyTCP)
	if err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the client's gRPC connection is closed meanwhile
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("get after the idle close: %q, %v", v, err)
	}
}

package xfer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

// readyPolicies are the transports the readiness tests run over.
var readyPolicies = []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM}

// TestExportReachesConnectedPeers: a region exported after a peer
// connected reaches it, and Peer.Region waits for the name while the
// connection is young: a peer that dials the moment the server listens,
// before it exported anything, finds the region and writes to it, 50
// times out of 50.
func TestExportReachesConnectedPeers(t *testing.T) {
	for _, policy := range readyPolicies {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cli, err := xfer.Open(ctx, xfer.Config{Transport: policy, MemoryMB: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			buf, err := cli.Alloc(64)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				srv, err := xfer.Open(ctx, xfer.Config{Transport: policy, Listen: "127.0.0.1:0", MemoryMB: 1})
				if err != nil {
					t.Fatal(err)
				}
				exported := make(chan error, 1)
				go func() {
					r, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
					if err == nil {
						srv.Export("late", r)
					}
					exported <- err
				}()
				p, err := cli.Dial(ctx, srv.Addr())
				if err != nil {
					t.Fatalf("round %d: %v", i, err)
				}
				desc, ok := p.Region("late")
				if !ok {
					t.Fatalf("round %d: the region exported as the peer connected never reached it", i)
				}
				if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
					t.Fatalf("round %d: write to the late region: %v", i, err)
				}
				if err := <-exported; err != nil {
					t.Fatal(err)
				}
				p.Close()
				srv.Close()
			}
		})
	}
}

// TestExportAfterHandshake: a region exported long after the handshake is
// announced to the connected peer.
func TestExportAfterHandshake(t *testing.T) {
	for _, policy := range readyPolicies {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv := targetServer(ctx, t, xfer.Config{Transport: policy, Listen: "127.0.0.1:0", MemoryMB: 1})
			_, p := openDialed(ctx, t, xfer.Config{Transport: policy, MemoryMB: 1, HandshakeTimeout: 200 * time.Millisecond}, srv.Addr())
			// The connection is older than the handshake timeout: an
			// absent name is absent at once.
			time.Sleep(300 * time.Millisecond)
			if _, ok := p.Region("later"); ok {
				t.Fatal("a region nobody exported was found")
			}
			r, err := srv.NewRegion(4096, xfer.AccessRead)
			if err != nil {
				t.Fatal(err)
			}
			srv.Export("later", r)
			for {
				if d, ok := p.Region("later"); ok {
					if d.Len != 4096 || d.Access != xfer.AccessRead {
						t.Fatalf("announced descriptor %+v", d)
					}
					break
				}
				if ctx.Err() != nil {
					t.Fatal("the export never reached the connected peer")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// TestRegionAbsentWithinHandshakeTimeout: Peer.Region says a name is absent
// once the connection is handshake_timeout old, not later.
func TestRegionAbsentWithinHandshakeTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := targetServer(ctx, t, xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 1})
	_, p := openDialed(ctx, t, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, HandshakeTimeout: 500 * time.Millisecond}, srv.Addr())
	start := time.Now()
	if _, ok := p.Region("nope"); ok {
		t.Fatal("a region nobody exported was found")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Region waited %v for an absent name; the bound is the handshake timeout (500ms)", d)
	}
	if _, ok := p.Region("target"); !ok {
		t.Fatal("the region of the handshake is missing")
	}
}

// TestHoldPeersUntilReady: an engine opened with HoldPeers answers no
// handshake before Ready; a peer held meanwhile connects once it is
// called, finds the exports, and is told they are complete (Region
// does not wait for an absent name).
func TestHoldPeersUntilReady(t *testing.T) {
	for _, policy := range readyPolicies {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := xfer.Open(ctx, xfer.Config{Transport: policy, Listen: "127.0.0.1:0", MemoryMB: 1, HoldPeers: true})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			cli, err := xfer.Open(ctx, xfer.Config{Transport: policy, MemoryMB: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			type dialed struct {
				p   *xfer.Peer
				err error
			}
			done := make(chan dialed, 1)
			go func() {
				p, err := cli.Dial(ctx, srv.Addr())
				done <- dialed{p, err}
			}()
			select {
			case d := <-done:
				t.Fatalf("a handshake was answered before Ready: %v", d.err)
			case <-time.After(200 * time.Millisecond):
			}
			r, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			srv.Export("target", r)
			srv.Ready()
			d := <-done
			if d.err != nil {
				t.Fatal(d.err)
			}
			if _, ok := d.p.Region("target"); !ok {
				t.Fatal("the peer held until Ready misses the export")
			}
			start := time.Now()
			if _, ok := d.p.Region("nope"); ok {
				t.Fatal("a region nobody exported was found")
			}
			if w := time.Since(start); w > 5*time.Second {
				t.Fatalf("Region waited %v for a name a ready engine did not list (handshake_timeout 10s)", w)
			}
		})
	}
}

// TestHoldPeersNeverReady: a peer held by an engine that never becomes
// ready is refused, with the reason, within the handshake timeout.
func TestHoldPeersNeverReady(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 1,
		HoldPeers: true, HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	start := time.Now()
	_, err = cli.Dial(ctx, srv.Addr())
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("dial of an engine that is never ready: %v, want a refusal saying it is not ready", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refused after %v; the acceptor's handshake timeout is 300ms", d)
	}
}

// TestRegionNoWaitWithoutAnnouncements: over a transport that cannot tell
// of later exports (the twin), Region does not wait for a name the
// handshake did not list: none can come.
func TestRegionNoWaitWithoutAnnouncements(t *testing.T) {
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyTCP, Config: withTwin(xfer.Config{})}, "")
	if got := p.Peer.Transport(); got != "twin" {
		t.Fatalf("transport %q, want twin", got)
	}
	start := time.Now()
	if _, ok := p.Peer.Region("nope"); ok {
		t.Fatal("a region nobody exported was found")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Region waited %v over a transport that tells of no later export", d)
	}
}

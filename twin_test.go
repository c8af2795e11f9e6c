package xfer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/twin"
	"github.com/xferio/xfer/xfertest"
)

// withTwin returns cfg with the in-memory twin transport added: engines
// opened with it connect over the twin, whatever their policy.
func withTwin(cfg xfer.Config) xfer.Config {
	cfg.ExtraTransport = func() transport.Transport { return twin.New() }
	return cfg
}

// The engine runs the end-to-end conformance suite over the twin: the
// layers above the transport contract, without a wire. (The same suite
// runs over tcp, shm and rdma from their packages; the twin is never the
// only test of a feature.)
func TestTwinConformance(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyTCP, Want: "twin", Config: withTwin(xfer.Config{})})
}

// A WRITE, a READ, a write-with-notify and a SEND round trip between two
// engines over the twin.
func TestTwinRoundTrip(t *testing.T) {
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyTCP, Config: withTwin(xfer.Config{})}, "")
	if got := p.Peer.Transport(); got != "twin" {
		t.Fatalf("transport %q, want twin", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, _ := p.Peer.Region("target")
	buf, err := p.Client.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i * 7)
	}
	if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(4096)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Target.Bytes()[4096:4096+len(buf.Bytes())], buf.Bytes()) {
		t.Fatal("write: target differs")
	}
	back, err := p.Client.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Peer.Read(ctx, back.Bytes(), desc.At(4096)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Bytes(), buf.Bytes()) {
		t.Fatal("read: data differs")
	}
	if err := p.Peer.WriteNotify(ctx, buf.Bytes()[:100], desc.At(0), 42); err != nil {
		t.Fatal(err)
	}
	n, err := p.Server.WaitNotify(ctx)
	if err != nil || n.Value != 42 || n.Len != 100 || n.Region != desc.ID || n.Addr != desc.Addr {
		t.Fatalf("notification %+v, %v", n, err)
	}
	sp, err := p.Server.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Peer.Send(ctx, buf.Bytes()[:5]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	k, err := sp.Recv(ctx, got)
	if err != nil || !bytes.Equal(got[:k], buf.Bytes()[:5]) {
		t.Fatalf("recv: %x, %v", got[:k], err)
	}
	if err := sp.Send(ctx, p.Server.DefaultRegion().Bytes()[:3]); err != nil {
		t.Fatalf("send back: %v", err)
	}
	if k, err := p.Peer.Recv(ctx, got); err != nil || k != 3 {
		t.Fatalf("recv back: %d, %v", k, err)
	}
}

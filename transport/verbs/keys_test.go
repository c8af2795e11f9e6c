package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// The rkeys of the regions the server exports come with its QP numbers: the
// client's first WRITE and READ to one need no attach round trip. A region
// exported after the connection, or never exported, is attached on first
// use, once. Every access is checked against the server's memory, so a
// wrong rkey fails the test (the NIC refuses it).
func TestExportedKeysNeedNoAttach(t *testing.T) {
	eachSetup(t, func(t *testing.T, dev string, cm bool) {
		p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev, UseCM: cm}}}, "")
		if p.Peer.Transport() != "rdma" {
			t.Fatalf("transport %s", p.Peer.Transport())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		buf, err := p.Client.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		fill := func(b byte) []byte {
			for i := range buf.Bytes() {
				buf.Bytes()[i] = b + byte(i)
			}
			return append([]byte(nil), buf.Bytes()...)
		}

		desc, ok := p.Peer.Region("target")
		if !ok {
			t.Fatal("no target region")
		}
		before := verbs.Attaches()
		want := fill(1)
		if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(4096)); err != nil {
			t.Fatal(err)
		}
		if got := p.Target.Bytes()[4096 : 4096+4096]; !bytes.Equal(got, want) {
			t.Fatal("the write to the exported region did not land")
		}
		fill(0)
		if err := p.Peer.Read(ctx, buf.Bytes(), desc.At(4096)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatal("the read from the exported region returned other bytes")
		}
		if n := verbs.Attaches() - before; n != 0 {
			t.Fatalf("%d attach round trips to an exported region, want 0", n)
		}

		// Exported after the connection: attached on first use, once.
		late, err := p.Server.NewRegion(1<<20, xfer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		defer late.Close()
		p.Server.Export("late", late)
		before = verbs.Attaches()
		for i := range 3 {
			want = fill(byte(10 + i))
			if err := p.Peer.Write(ctx, buf.Bytes(), late.Desc().At(uint64(i)*4096)); err != nil {
				t.Fatal(err)
			}
			if got := late.Bytes()[i*4096 : (i+1)*4096]; !bytes.Equal(got, want) {
				t.Fatal("the write to the late region did not land")
			}
		}
		if n := verbs.Attaches() - before; n != 1 {
			t.Fatalf("%d attach round trips to a region exported after the connection, want 1", n)
		}

		// A second client connects after "late" was exported: it gets
		// that rkey with the QP numbers too.
		c2, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyRDMA, MemoryMB: 16, RDMA: verbs.Config{Device: dev, UseCM: cm}})
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		p2, err := c2.Dial(ctx, p.Server.Addr())
		if err != nil {
			t.Fatal(err)
		}
		ldesc, ok := p2.Region("late")
		if !ok {
			t.Fatal("no late region on the second client")
		}
		buf2, _ := c2.Alloc(4096)
		before = verbs.Attaches()
		copy(buf2.Bytes(), fill(30))
		if err := p2.Write(ctx, buf2.Bytes(), ldesc.At(8192)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(late.Bytes()[8192:8192+4096], buf2.Bytes()) {
			t.Fatal("the second client's write did not land")
		}
		if n := verbs.Attaches() - before; n != 0 {
			t.Fatalf("%d attach round trips from the second client, want 0", n)
		}
		// Closed: the server revokes the rkey it sent, and the client's
		// next access is refused by the server, not by the NIC, so the
		// connection stays up.
		if err := late.Close(); err != nil {
			t.Fatal(err)
		}
		// The revocation was sent before the MR was deregistered; give
		// the client's control stream a moment to take it.
		time.Sleep(200 * time.Millisecond)
		if err := p2.Write(ctx, buf2.Bytes(), ldesc.At(0)); !errors.Is(err, xfer.ErrRemoteAccess) {
			t.Fatalf("write to a closed exported region: %v, want a remote access error", err)
		}
		tdesc, _ := p2.Region("target")
		if err := p2.Write(ctx, buf2.Bytes(), tdesc.At(0)); err != nil {
			t.Fatalf("after the refused write: %v", err)
		}
		if p2.Transport() != "rdma" {
			t.Fatalf("second client on %s", p2.Transport())
		}
	})
}

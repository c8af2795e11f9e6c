package verbs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// A stale rkey makes the NIC refuse the access: the caller gets a remote
// access error (RoCE; iWARP acknowledges no WRITE and drops the connection
// instead), the QP is in the error state, and the peer's next operation
// brings up new QPs and works.
func TestQPErrorReconnects(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	verbs.IgnoreRevokes(true)
	defer verbs.IgnoreRevokes(false)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := p.Server.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	stale := r.Desc()
	buf, _ := p.Client.Alloc(4096)
	if err := p.Peer.Write(ctx, buf.Bytes(), stale.At(0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil { // deregisters the MR: the rkey is dead
		t.Fatal(err)
	}
	err = p.Peer.Write(ctx, buf.Bytes(), stale.At(0))
	if !strings.HasPrefix(dev, "siw") {
		if !errors.Is(err, xfer.ErrRemoteAccess) {
			t.Fatalf("write with a dead rkey: %v, want a remote access error from the NIC", err)
		}
	}
	t.Logf("write with a dead rkey: %v", err)
	// The QPs are in the error state; the next operations reconnect.
	desc, _ := p.Peer.Region("target")
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0))
		if err == nil {
			break
		}
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, xfer.ErrRemoteAccess) {
			t.Fatalf("after the QP error: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection after the QP error: %v", err)
		}
	}
	if p.Peer.Transport() != "rdma" {
		t.Fatalf("reconnected on %s", p.Peer.Transport())
	}
	got := make([]byte, 4096)
	dst, _ := p.Client.Alloc(4096)
	if err := p.Peer.Read(ctx, dst.Bytes(), desc.At(0)); err != nil {
		t.Fatal(err)
	}
	copy(got, dst.Bytes())
}

// The target process is killed mid-transfer: the writer gets an error, never
// a hang.
func TestPeerKilled(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildTarget$")
	cmd.Env = append(os.Environ(), "XFER_TEST_CHILD=1", "XFER_TEST_DEVICE="+dev)
	cmd.Stderr = os.Stderr
	out := testutil.StartPiped(t, cmd)
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	addr := ""
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatal("the child target printed no address")
	}
	e, err := xfer.Open(context.Background(), xfer.Config{Transport: xfer.PolicyRDMA, MemoryMB: 16, RDMA: verbs.Config{Device: dev}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	desc, ok := p.Region("target")
	if !ok {
		t.Fatal("no target region")
	}
	buf, _ := e.Alloc(1 << 20)
	done := make(chan error, 1)
	go func() {
		for {
			if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Kill()
	start := time.Now()
	select {
	case err := <-done:
		t.Logf("error %v after the kill: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(30 * time.Second):
		t.Fatal("write to a killed peer hung")
	}
}

// TestChildTarget is the target process of TestPeerKilled.
func TestChildTarget(t *testing.T) {
	if os.Getenv("XFER_TEST_CHILD") != "1" {
		t.Skip("the child side of TestPeerKilled")
	}
	e, err := xfer.Open(context.Background(), xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 16, RDMA: verbs.Config{Device: os.Getenv("XFER_TEST_DEVICE")}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.NewRegion(4<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	e.Export("target", r)
	fmt.Printf("addr %s\n", e.Addr())
	time.Sleep(time.Minute) // until killed
}

// A write-with-notify is one WRITE_WITH_IMM, whose completion tells the
// target its length: one larger than the port's largest message is refused
// with ErrTooLarge, naming the limit, and nothing reaches the target. On
// iWARP (no immediates) the notification is a message of its own and any
// size goes.
func TestWriteNotifyTooLarge(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	verbs.SetMaxMsgSize(64 << 10)
	defer verbs.SetMaxMsgSize(0)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, _ := p.Peer.Region("target")
	src, err := p.Client.Alloc(128 << 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = 0xA5
	}
	err = p.Peer.WriteNotify(ctx, src.Bytes()[:64<<10+1], desc.At(0), 1)
	iwarp := strings.HasPrefix(dev, "siw") || strings.HasPrefix(dev, "iw")
	switch {
	case iwarp && err != nil:
		t.Fatalf("iWARP write-with-notify of 64 KiB + 1: %v", err)
	case !iwarp && !errors.Is(err, xfer.ErrTooLarge):
		t.Fatalf("write-with-notify past the port's largest message: %v, want ErrTooLarge", err)
	case !iwarp && !strings.Contains(err.Error(), "at most 65536 bytes per message"):
		t.Fatalf("error %q does not state the limit", err)
	case !iwarp:
		for i, b := range p.Target.Bytes()[:64<<10+1] {
			if b != 0 {
				t.Fatalf("byte %d of the target changed after a refused write", i)
			}
		}
	}
	if err := p.Peer.WriteNotify(ctx, src.Bytes()[:64<<10], desc.At(0), 2); err != nil {
		t.Fatalf("write-with-notify at the limit: %v", err)
	}
	for {
		n, err := p.Server.WaitNotify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Value == 2 {
			if n.Len != 64<<10 {
				t.Fatalf("notification %+v, want 64 KiB", n)
			}
			break
		}
	}
}

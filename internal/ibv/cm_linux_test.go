//go:build cgo

package ibv

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// TestCM connects two QPs through rdma_cm (the only way on iWARP; RoCE too)
// and runs the data-path tests.
func TestCM(t *testing.T) {
	p := newCMPair(t, pairOpts{})
	testDataPath(t, p)
}

// TestCMErrors: remote access errors on QPs connected through rdma_cm.
func TestCMErrors(t *testing.T) {
	d := openTestDevice(t)
	if d.info.IWARP() {
		testRemoteAccessIWARP(t)
		return
	}
	testRemoteAccess(t, func(tb testing.TB) *pair { return newCMPair(tb, pairOpts{}) })
}

// testRemoteAccessIWARP: on iWARP a bad access is detected by the responder,
// which sends a TERMINATE and drops the connection. RDMA WRITEs are not
// acknowledged, so a bad WRITE completes successfully at the requester; what
// shows is the responder's receives being flushed and both ends getting
// DISCONNECTED. A bad READ completes with an error (siw on Linux 6.1 reports
// "flushed", not the TERMINATE's "remote access error"), and both ends get
// DISCONNECTED. Work posted after that never completes on siw.
func testRemoteAccessIWARP(t *testing.T) {
	for _, c := range []struct {
		name string
		wr   func(p *pair) SendWR
	}{
		{"WriteWrongRKey", func(p *pair) SendWR {
			return SendWR{ID: 0xe00, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
				RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey ^ 0x5a5a00}
		}},
		{"ReadWrongRKey", func(p *pair) SendWR {
			return SendWR{ID: 0xe00, Op: OpRead, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
				RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey ^ 0x5a5a00}
		}},
		{"ReadOutOfRange", func(p *pair) SendWR {
			return SendWR{ID: 0xe00, Op: OpRead, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
				RemoteAddr: uint64(p.mrB.Addr) + uint64(p.mrB.Len), RKey: p.mrB.RKey}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newCMPair(t, pairOpts{})
			p.postRecvB(t, RecvWR{ID: 0xb0, SGE: p.mrB.SGE(0, 64)})
			wr := c.wr(p)
			postSend(t, p.a, wr)
			wc := waitWC(t, p.cqA, 0xe00, false)
			switch {
			case wr.Op == OpRead && wc.Status == WCSuccess:
				t.Errorf("a bad RDMA READ completed successfully")
			case wr.Op == OpRead && !errors.Is(wc.Err(), ErrRemoteAccess) && !errors.Is(wc.Err(), ErrFlushed):
				t.Errorf("bad RDMA READ: %v, want a remote access error or flushed", wc.Err())
			}
			t.Logf("requester: %v %v", wc.Opcode, wc.Status)
			if wr.Op == OpWrite {
				if wc := waitWC(t, p.cqB, 0xb0, false); !errors.Is(wc.Err(), ErrFlushed) {
					t.Errorf("responder's receive: %v, want flushed", wc.Err())
				}
			}
			for _, ch := range []*CMChannel{p.cmCli, p.cmSrv} {
				expect(t, ch, CMEventDisconnected)
			}
			p.established = false // the TERMINATE took the connection down
		})
	}
}

// TestCMReject: a rejected connect reports REJECTED with the private data.
func TestCMReject(t *testing.T) {
	testutil.RequireVerbs(t)
	if err := LoadCM(); err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	addr := testAddr(t)
	ch, err := NewCMChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
	}()
	lis, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := lis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	cli, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := cli.ResolveAddrPort(netip.AddrPortFrom(addr, lis.Port()), waitTimeout); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, CMEventAddrResolved)
	if err := cli.ResolveRoute(waitTimeout); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, CMEventRouteResolved)
	ctx := cli.Context()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	if _, err := cli.CreateQP(pd, QPInitAttr{SendCQ: cq}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CreateQP(pd, QPInitAttr{SendCQ: cq}); err == nil {
		t.Error("a second CreateQP on a CM ID succeeded")
	}
	if err := cli.Connect([]byte("knock"), 1, 1); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, ch, CMEventConnectRequest)
	if ev.Listen != lis || ev.ID == nil {
		t.Fatalf("CONNECT_REQUEST %+v", ev)
	}
	if err := ev.ID.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.Close(); err != nil {
		t.Fatal(err)
	}
	rej := expect(t, ch, CMEventRejected)
	if rej.ID != cli || rej.Status == 0 {
		t.Errorf("REJECTED %+v", rej)
	}
	if !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Logf("REJECTED private data %q (the transport may not carry it)", rej.PrivateData)
	}
	// Closing the ID closes its QP.
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if cli.QP() != nil {
		t.Error("QP() after Close is not nil")
	}
}

// TestCMChannelWait: timeouts, cancelation and errors of an idle channel.
func TestCMChannelWait(t *testing.T) {
	if err := LoadCM(); err != nil {
		testutil.SkipOrFail(t, err.Error())
	}
	ch, err := NewCMChannel()
	if err != nil {
		// Without the rdma_ucm module there is no /dev/infiniband/rdma_cm.
		testutil.RequireVerbs(t)
		t.Fatal(err)
	}
	defer ch.Close()
	if ch.FD() < 0 {
		t.Errorf("FD() = %d", ch.FD())
	}
	start := time.Now()
	if _, err := ch.GetEvent(30 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("GetEvent on an idle channel = %v, want ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("GetEvent(30ms) took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := ch.WaitEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitEvent = %v, want context.DeadlineExceeded", err)
	}
	id, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err == nil {
		t.Error("Close with an open CM ID succeeded")
	}
	if id.Context() != nil {
		t.Error("an unbound CM ID has a context")
	}
	if err := id.Bind(netip.AddrPort{}); err == nil {
		t.Error("Bind to the invalid address succeeded")
	}
	if err := id.Close(); err != nil {
		t.Fatal(err)
	}
	if err := id.Bind(netip.MustParseAddrPort("127.0.0.1:0")); !errors.Is(err, ErrClosed) {
		t.Errorf("Bind after Close = %v, want ErrClosed", err)
	}
}

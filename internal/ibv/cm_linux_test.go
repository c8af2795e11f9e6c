//go:build cgo

package ibv_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/testutil"
)

// The data-path tests of package ibv run on iWARP too: its QPs connect
// through the kernel's rdma_cm, which internal/rdmacm drives. ibv cannot
// import it (rdmacm imports ibv), so this external test file hands the
// internal tests the connector.
func init() { ibv.ConnectCM = connectCM }

const cmTimeout = 20 * time.Second

// cmConn is an ibv.CMConn.
type cmConn struct {
	dropped func(testing.TB)
	close   func()
}

func (c *cmConn) Dropped(tb testing.TB) { c.dropped(tb) }
func (c *cmConn) Close()                { c.close() }

// connectCM connects a (the active side) to b (the passive side), both on
// ctx, through a listener and a connector in this process, each with its
// own channel, driven in one goroutine.
func connectCM(tb testing.TB, ctx *ibv.Context, a, b *ibv.QP, rd int) ibv.CMConn {
	tb.Helper()
	addr := testutil.RequireRDMAAddr(tb)
	srv, err := rdmacm.NewChannel()
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := rdmacm.NewChannel()
	if err != nil {
		srv.Close()
		tb.Fatal(err)
	}
	var lis, idA, idB *rdmacm.ID
	established := false
	teardown := func() {
		if established {
			disconnected := func(ch *rdmacm.Channel, who string) {
				for {
					ev, err := ch.GetEvent(cmTimeout)
					if err != nil {
						tb.Errorf("%s: waiting for DISCONNECTED: %v", who, err)
						return
					}
					if ev.Type == rdmacm.EventDisconnected {
						return
					}
					if ev.Type != rdmacm.EventTimewaitExit {
						tb.Errorf("%s: %v, want DISCONNECTED", who, ev.Type)
						return
					}
				}
			}
			if ctx.Transport() != "iWARP" {
				// On InfiniBand and RoCE the QP goes to the error state
				// first; on iWARP the disconnect does it.
				if err := a.ToError(); err != nil {
					tb.Error(err)
				}
			}
			if err := idA.Disconnect(); err != nil {
				tb.Error(err)
			}
			disconnected(srv, "passive side")
			if err := idB.Disconnect(); err != nil {
				tb.Logf("passive side Disconnect after DISCONNECTED: %v", err)
			}
			disconnected(cli, "active side")
		}
		for _, c := range []interface{ Close() error }{idA, idB, lis, cli, srv} {
			if err := c.Close(); err != nil {
				tb.Error(err)
			}
		}
	}
	ok := false
	defer func() {
		if !ok {
			teardown()
		}
	}()
	expect := func(ch *rdmacm.Channel, want rdmacm.EventType) rdmacm.Event {
		ev, err := ch.GetEvent(cmTimeout)
		if err != nil {
			tb.Fatalf("waiting for %v: %v", want, err)
		}
		if ev.Type != want {
			tb.Fatalf("got %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err(), want)
		}
		return ev
	}
	if lis, err = srv.CreateID(); err != nil {
		tb.Fatal(err)
	}
	if err := lis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		tb.Fatal(err)
	}
	if on, err := lis.OnDevice(ctx); err != nil || !on {
		testutil.SkipOrFail(tb, "rdma_cm maps "+addr.String()+" to another device than "+ctx.Name())
	}
	if err := lis.Listen(8); err != nil {
		tb.Fatal(err)
	}
	if idA, err = cli.CreateID(); err != nil {
		tb.Fatal(err)
	}
	if err := idA.ResolveAddrPort(netip.AddrPortFrom(addr, lis.Port()), cmTimeout); err != nil {
		tb.Fatal(err)
	}
	expect(cli, rdmacm.EventAddrResolved)
	if err := idA.ResolveRoute(cmTimeout); err != nil {
		tb.Fatal(err)
	}
	expect(cli, rdmacm.EventRouteResolved)
	if err := idA.InitQP(a); err != nil {
		tb.Fatal(err)
	}
	if err := idA.Connect(a, []byte("xfer-hello"), rd); err != nil {
		tb.Fatal(err)
	}
	ev := expect(srv, rdmacm.EventConnectRequest)
	idB = ev.ID
	if !bytes.HasPrefix(ev.PrivateData, []byte("xfer-hello")) {
		tb.Errorf("CONNECT_REQUEST private data %q", ev.PrivateData)
	}
	if err := idB.InitQP(b); err != nil {
		tb.Fatal(err)
	}
	if err := idB.Accept(b, []byte("xfer-welcome"), rd); err != nil {
		tb.Fatal(err)
	}
	if ctx.Transport() == "iWARP" {
		ev = expect(cli, rdmacm.EventEstablished)
	} else {
		ev = expect(cli, rdmacm.EventConnectResponse)
		if err := idA.Established(a); err != nil {
			tb.Fatal(err)
		}
	}
	if ev.ID != idA {
		tb.Errorf("%v for %v, want the connector %v", ev.Type, ev.ID, idA)
	}
	if ev = expect(srv, rdmacm.EventEstablished); ev.ID != idB {
		tb.Errorf("ESTABLISHED for %v, want the accepted ID %v", ev.ID, idB)
	}
	established, ok = true, true
	dropped := func(tb testing.TB) {
		tb.Helper()
		for _, ch := range []*rdmacm.Channel{cli, srv} {
			expect(ch, rdmacm.EventDisconnected)
		}
		established = false
	}
	return &cmConn{dropped: dropped, close: teardown}
}

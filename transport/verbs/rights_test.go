package verbs

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
)

// The NIC, not the engine, keeps a malicious peer to a region's rights. The
// dialer plays the attacker: it learns the rkeys honestly (a READ attaches
// each region), then posts raw RDMA WRITEs on its QP through internal/ibv,
// past every check of its engine, with the read-only region's rkey, and
// with a read-write region's rkey at addresses outside the region. The
// target's NIC refuses each: the attacker's QP fails (on RoCE with a
// remote access error; an iWARP responder terminates the connection), and
// the target's memory is unchanged byte for byte.
func TestMaliciousPeerRawWrites(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	const size = 64 << 10
	cases := []struct {
		name string
		rw   bool   // aim at the read-write region (else the read-only one)
		off  int64  // from the region's base
		n    uint32 // bytes written
	}{
		{"ReadOnlyKey", false, 0, 4096},
		{"ReadOnlyKeyOneByte", false, size - 1, 1},
		{"PastTheEnd", true, size - 2048, 4096},
		{"AtTheEnd", true, size, 64},
		{"BeforeTheBase", true, -4096, 4096},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := transporttest.NewPair(t, func(testing.TB) transport.Transport { return New(Config{Device: dev}) }, transporttest.PairConfig{})
			ro := p.Acceptor.Host.NewRegion(size, transport.AccessRead)
			rw := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
			transporttest.Fill(ro.Bytes(), 1)
			transporttest.Fill(rw.Bytes(), 2)
			snap := map[*transporttest.Region][]byte{ro: bytes.Clone(ro.Bytes()), rw: bytes.Clone(rw.Bytes())}
			local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)

			// Honest READs attach both regions: the attacker now holds
			// their rkeys, as any peer they were exported to does.
			for _, r := range []*transporttest.Region{ro, rw} {
				if err := post(t, p.Dialer.Endpoint, transport.OpRead, local, r.At(0), 4096); err != nil {
					t.Fatalf("honest read of region %d: %v", r.ID(), err)
				}
			}
			transporttest.Fill(local.Bytes(), 3)

			e := p.Dialer.Endpoint.(*Endpoint)
			target := ro
			if tc.rw {
				target = rw
			}
			e.mu.Lock()
			a := e.att[target.ID()]
			e.mu.Unlock()
			if a == nil {
				t.Fatal("the honest read left no rkey")
			}
			lmr, err := e.dev.mr(local.Handle())
			if err != nil {
				t.Fatal(err)
			}
			wr := ibv.SendWR{Op: ibv.OpWrite, ID: e.ref, // unsignalled: only a failure completes
				SGE:        ibv.SGE{Addr: uint64(addrOf(local.Bytes())), Len: tc.n, LKey: lmr.LKey},
				RemoteAddr: uint64(int64(target.Base()) + tc.off), RKey: a.rkey}
			e.life.RLock()
			_, err = e.qps[0].qp.PostSend([]ibv.SendWR{wr})
			e.life.RUnlock()
			if err != nil {
				t.Fatalf("post the raw write: %v", err)
			}
			select {
			case <-e.Done():
			case <-time.After(30 * time.Second):
				t.Error("the raw write completed without error: the NIC let it through")
			}
			t.Logf("the attacker's QP: %v", e.Err())
			if !e.dev.iwarp && !errors.Is(e.Err(), ibv.ErrRemoteAccess) {
				t.Errorf("the attacker's QP failed with %v, want a remote access error from the target's NIC", e.Err())
			}
			// Whatever the attacker's side saw, the target's memory is
			// what it was.
			for r, want := range snap {
				if !bytes.Equal(r.Bytes(), want) {
					t.Errorf("region %d (%v) changed under the refused write", r.ID(), r.Access())
				}
			}
		})
	}
}

// On RoCE and InfiniBand a write-only region cannot be read through its
// rkey either (iWARP's completion fence needs READ, see mrAccess).
func TestMRAccess(t *testing.T) {
	cases := []struct {
		a     transport.Access
		iwarp bool
		want  ibv.Access
	}{
		{transport.AccessRead, false, ibv.AccessLocalWrite | ibv.AccessRemoteRead},
		{transport.AccessRead, true, ibv.AccessLocalWrite | ibv.AccessRemoteRead},
		{transport.AccessWrite, false, ibv.AccessLocalWrite | ibv.AccessRemoteWrite},
		{transport.AccessWrite, true, ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead},
		{transport.AccessReadWrite, false, ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead},
		{0, false, ibv.AccessLocalWrite},
	}
	for _, c := range cases {
		if got := mrAccess(c.a, c.iwarp); got != c.want {
			t.Errorf("mrAccess(%v, iwarp %v) = %#x, want %#x", c.a, c.iwarp, got, c.want)
		}
	}
}

// post runs one operation on ep and waits for it.
func post(t *testing.T, ep transport.Endpoint, kind transport.OpKind, local *transporttest.Region, ra transport.RemoteAddr, n int) error {
	t.Helper()
	done := make(chan struct{})
	op := &transport.Op{Kind: kind, Local: local.Bytes()[:n], Remote: ra, Region: local.Handle(), Done: doneFunc(func(*transport.Op) { close(done) })}
	ep.Post([]*transport.Op{op}, true)
	select {
	case <-done:
		return op.Err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no completion in 30s", kind)
		return nil
	}
}

type doneFunc func(*transport.Op)

func (f doneFunc) OpDone(op *transport.Op) { f(op) }

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

// The NIC, not the engine, keeps a malicious peer to a region's rights and
// a grant's range. The dialer plays the attacker: it learns the rkeys
// honestly (a READ attaches each region), then posts raw RDMA WRITEs on its
// QP through internal/ibv, past every check of its engine: with the
// read-only region's rkey, with a read-write region's rkey at addresses
// outside the region, with a grant's rkey outside the grant (inside its
// region), with a read-only grant's rkey, and with the rkey of a grant
// that was closed. The target's NIC refuses each: the attacker's QP fails
// (on RoCE with a remote access error; an iWARP responder terminates the
// connection), and the target's memory is unchanged byte for byte.
func TestMaliciousPeerRawWrites(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	const size = 64 << 10
	type target struct {
		ro, rw, grant, roGrant *transporttest.Region
	}
	cases := []struct {
		name  string
		key   func(tg target) *transporttest.Region // whose rkey
		addr  func(tg target) uint64
		n     uint32
		close bool // close the key's region (a grant) before the write
	}{
		{"ReadOnlyKey", func(tg target) *transporttest.Region { return tg.ro }, func(tg target) uint64 { return tg.ro.Base() }, 4096, false},
		{"ReadOnlyKeyOneByte", func(tg target) *transporttest.Region { return tg.ro }, func(tg target) uint64 { return tg.ro.Base() + size - 1 }, 1, false},
		{"PastTheEnd", func(tg target) *transporttest.Region { return tg.rw }, func(tg target) uint64 { return tg.rw.Base() + size - 2048 }, 4096, false},
		{"AtTheEnd", func(tg target) *transporttest.Region { return tg.rw }, func(tg target) uint64 { return tg.rw.Base() + size }, 64, false},
		{"BeforeTheBase", func(tg target) *transporttest.Region { return tg.rw }, func(tg target) uint64 { return tg.rw.Base() - 4096 }, 4096, false},
		{"GrantKeyAtTheRegionsBase", func(tg target) *transporttest.Region { return tg.grant }, func(tg target) uint64 { return tg.rw.Base() }, 4096, false},
		{"GrantKeyAcrossTheGrantsEnd", func(tg target) *transporttest.Region { return tg.grant }, func(tg target) uint64 { return tg.grant.Base() + 8<<10 - 2048 }, 4096, false},
		{"ReadOnlyGrantKey", func(tg target) *transporttest.Region { return tg.roGrant }, func(tg target) uint64 { return tg.roGrant.Base() }, 64, false},
		{"ClosedGrantKey", func(tg target) *transporttest.Region { return tg.grant }, func(tg target) uint64 { return tg.grant.Base() }, 4096, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := transporttest.NewPair(t, func(testing.TB) transport.Transport { return New(Config{Device: dev}, nil) }, transporttest.PairConfig{})
			var tg target
			tg.ro = p.Acceptor.Host.NewRegion(size, transport.AccessRead)
			tg.rw = p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
			tg.grant = tg.rw.Grant(16<<10, 8<<10, transport.AccessReadWrite)
			tg.roGrant = tg.rw.Grant(32<<10, 4096, transport.AccessRead)
			defer tg.grant.Close()
			defer tg.roGrant.Close()
			transporttest.Fill(tg.ro.Bytes(), 1)
			transporttest.Fill(tg.rw.Bytes(), 2)
			snap := map[*transporttest.Region][]byte{tg.ro: bytes.Clone(tg.ro.Bytes()), tg.rw: bytes.Clone(tg.rw.Bytes())}
			local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)

			// Honest READs attach every region and grant: the attacker
			// now holds their rkeys, as any peer they were given to does.
			for _, r := range []*transporttest.Region{tg.ro, tg.rw, tg.grant, tg.roGrant} {
				if err := post(t, p.Dialer.Endpoint, transport.OpRead, local, r.At(0), 4096); err != nil {
					t.Fatalf("honest read of region %d: %v", r.ID(), err)
				}
			}
			transporttest.Fill(local.Bytes(), 3)

			e := p.Dialer.Endpoint.(*Endpoint)
			key := tc.key(tg)
			e.mu.Lock()
			a := e.att[key.ID()]
			e.mu.Unlock()
			if a == nil {
				t.Fatal("the honest read left no rkey")
			}
			if tc.close {
				// The revoke reaches the attacker's engine, which would
				// drop the rkey: the attacker kept a copy, and the grant's
				// registration is gone by the time Close returns.
				if err := key.Close(); err != nil {
					t.Fatal(err)
				}
			}
			lmr, err := e.dev.mr(local.Handle())
			if err != nil {
				t.Fatal(err)
			}
			wr := ibv.SendWR{Op: ibv.OpWrite, ID: e.ref, // unsignalled: only a failure completes
				SGE:        ibv.SGE{Addr: uint64(addrOf(local.Bytes())), Len: tc.n, LKey: lmr.LKey},
				RemoteAddr: tc.addr(tg), RKey: a.rkey}
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

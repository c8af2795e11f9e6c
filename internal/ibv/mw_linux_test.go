//go:build cgo

package ibv

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// windowPair is a pair whose b side registers its buffer once more with
// AccessMWBind and binds a type 2 window over [winOff, +winLen) of it,
// through its own QP, with the rights acc.
type windowPair struct {
	*pair
	mr   *MR // bufB, bindable
	mw   *MW
	rkey uint32
}

const winOff, winLen = 4096, 8192

func newWindowPair(t *testing.T, acc Access) *windowPair {
	t.Helper()
	p := newPair(t, pairOpts{})
	if !p.info.MemWindows {
		mw, err := p.pd.AllocMW()
		if err == nil {
			mw.Close()
		}
		t.Skipf("%s has no type 2 memory windows (ibv_alloc_mw: %v)", p.info.Name, err)
	}
	w := &windowPair{pair: p}
	var err error
	if w.mr, err = p.pd.RegMR(p.bufB, allAccess|AccessMWBind); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.mr.Close(); err != nil {
			t.Error(err)
		}
	})
	if w.mw, err = p.pd.AllocMW(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.mw.Close(); err != nil {
			t.Error(err)
		}
	})
	before := w.mw.RKey()
	if w.rkey, err = p.b.PostBindMW(0xb1, w.mw, w.mr, w.mr.Addr+winOff, winLen, acc); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, p.cqB, 0xb1, true)
	if wc.Opcode != WCBindMW {
		t.Errorf("bind completion opcode %v, want %v", wc.Opcode, WCBindMW)
	}
	if w.rkey == before || w.rkey == w.mr.RKey || w.mw.RKey() != w.rkey {
		t.Fatalf("window rkey %#x (was %#x, MR %#x, now %#x): want a new one", w.rkey, before, w.mr.RKey, w.mw.RKey())
	}
	return w
}

// refused posts wr on a and checks that the NIC answers a remote access
// error and that bufB is unchanged.
func (w *windowPair) refused(t *testing.T, wr SendWR) {
	t.Helper()
	w.check(t, wr, false)
}

// outside is refused for an access outside the window's range. SoftRoCE
// (rxe, Linux 6.1 and 6.12 in tools/rdma-vm) checks a window's rights and
// its validity but not its range: the access lands anywhere in the MR the
// window is bound to. There the test is skipped, saying so, unless the
// access is refused; every other provider must refuse it.
func (w *windowPair) outside(t *testing.T, wr SendWR) {
	t.Helper()
	w.check(t, wr, strings.HasPrefix(w.info.Name, "rxe"))
}

func (w *windowPair) check(t *testing.T, wr SendWR, rxeRange bool) {
	t.Helper()
	was := bytes.Clone(w.bufB)
	postSend(t, w.a, wr)
	wc := waitWC(t, w.cqA, wr.ID, false)
	if rxeRange && wc.Status == WCSuccess {
		t.Skipf("%s let %v at %#x, outside the window [%#x, +%d), through its rkey: rxe does not enforce a window's range",
			w.info.Name, wr.Op, wr.RemoteAddr, uint64(w.mr.Addr)+winOff, winLen)
	}
	if err := wc.Err(); !errors.Is(err, ErrRemoteAccess) {
		t.Errorf("completion %v (%+v), want a remote access error", err, wc)
	} else {
		t.Logf("refused: %v", err)
	}
	if !bytes.Equal(was, w.bufB) {
		t.Error("the refused access changed the target's memory")
	}
}

func TestMemWindow(t *testing.T) {
	rw := AccessRemoteRead | AccessRemoteWrite
	t.Run("ReadWriteInside", func(t *testing.T) {
		w := newWindowPair(t, rw)
		copy(w.bufA, bytes.Repeat([]byte{0x5c}, 64))
		at := uint64(w.mr.Addr) + winOff + winLen - 64
		postSend(t, w.a, SendWR{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: at, RKey: w.rkey})
		waitWC(t, w.cqA, 1, true)
		if !bytes.Equal(w.bufB[winOff+winLen-64:winOff+winLen], w.bufA[:64]) {
			t.Fatal("WRITE through the window did not land")
		}
		w.bufB[winOff] = 0xa7
		postSend(t, w.a, SendWR{ID: 2, Op: OpRead, Flags: FlagSignaled, SGE: w.mrA.SGE(128, 1), RemoteAddr: uint64(w.mr.Addr) + winOff, RKey: w.rkey})
		waitWC(t, w.cqA, 2, true)
		if w.bufA[128] != 0xa7 {
			t.Fatalf("READ through the window: %#x, want 0xa7", w.bufA[128])
		}
	})
	t.Run("OutsideWindow", func(t *testing.T) {
		w := newWindowPair(t, rw)
		w.outside(t, SendWR{ID: 3, Op: OpWrite, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr) + winOff + winLen - 32, RKey: w.rkey})
	})
	t.Run("BeforeWindow", func(t *testing.T) {
		w := newWindowPair(t, rw)
		w.outside(t, SendWR{ID: 8, Op: OpWrite, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr), RKey: w.rkey})
	})
	t.Run("ReadAfterWindow", func(t *testing.T) {
		w := newWindowPair(t, rw)
		w.outside(t, SendWR{ID: 9, Op: OpRead, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr) + winOff + winLen, RKey: w.rkey})
	})
	t.Run("WriteReadOnly", func(t *testing.T) {
		w := newWindowPair(t, AccessRemoteRead)
		w.refused(t, SendWR{ID: 4, Op: OpWrite, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr) + winOff, RKey: w.rkey})
	})
	t.Run("Invalidated", func(t *testing.T) {
		w := newWindowPair(t, rw)
		if err := w.b.PostLocalInv(0xb2, w.rkey); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, w.cqB, 0xb2, true); wc.Opcode != WCLocalInv {
			t.Errorf("invalidate completion opcode %v, want %v", wc.Opcode, WCLocalInv)
		}
		w.refused(t, SendWR{ID: 5, Op: OpWrite, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr) + winOff, RKey: w.rkey})
	})
	t.Run("Rebind", func(t *testing.T) {
		w := newWindowPair(t, rw)
		if err := w.b.PostLocalInv(0xb2, w.rkey); err != nil {
			t.Fatal(err)
		}
		waitWC(t, w.cqB, 0xb2, true)
		old := w.rkey
		rkey, err := w.b.PostBindMW(0xb3, w.mw, w.mr, w.mr.Addr, 64, AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		waitWC(t, w.cqB, 0xb3, true)
		if rkey == old {
			t.Fatalf("rebind kept the rkey %#x", rkey)
		}
		postSend(t, w.a, SendWR{ID: 6, Op: OpRead, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr), RKey: rkey})
		waitWC(t, w.cqA, 6, true)
		w.refused(t, SendWR{ID: 7, Op: OpRead, Flags: FlagSignaled, SGE: w.mrA.SGE(0, 64), RemoteAddr: uint64(w.mr.Addr) + winOff, RKey: old})
	})
}

func TestIncRKey(t *testing.T) {
	for _, c := range [][2]uint32{{0x1234_5600, 0x1234_5601}, {0x1234_56ff, 0x1234_5600}, {0xffff_ffff, 0xffff_ff00}} {
		if got := incRKey(c[0]); got != c[1] {
			t.Errorf("incRKey(%#x) = %#x, want %#x", c[0], got, c[1])
		}
	}
}

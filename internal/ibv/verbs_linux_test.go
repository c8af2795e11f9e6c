//go:build cgo

package ibv

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
)

// TestDevices lists the devices: the test device has an ACTIVE port, and a
// RoCE device in rdma-vm has the RoCE v2 GID of ::ffff:$RDMA_VM_IP at
// index 1.
func TestDevices(t *testing.T) {
	name := testutil.RequireVerbs(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		testutil.SkipOrFail(t, "Devices() lists no device")
	}
	var d *DeviceInfo
	for i := range devs {
		t.Logf("%s: %s, %s, fw %q, node GUID %s, max_qp %d, max_qp_wr %d, max_cqe %d, max_mr_size %#x, rd_atom %d/%d",
			devs[i].Name, devs[i].NodeType, devs[i].Transport, devs[i].FWVer, devs[i].NodeGUID,
			devs[i].MaxQP, devs[i].MaxQPWR, devs[i].MaxCQE, devs[i].MaxMRSize, devs[i].MaxQPRdAtom, devs[i].MaxQPInitRdAtom)
		for _, p := range devs[i].Ports {
			t.Logf("  port %d: %s (%s), %s, MTU %d/%d, LID %d, rate %q, %d GIDs of %d",
				p.Num, p.State, p.PhysState, p.LinkLayer, p.ActiveMTU, p.MaxMTU, p.LID, p.Rate, len(p.GIDs), p.GIDTableLen)
			for _, g := range p.GIDs {
				t.Logf("    GID %d: %s %s %s ipv4=%v ll=%v", g.Index, g, g.Type, g.Netdev, g.IPv4Mapped, g.LinkLocal)
			}
		}
		if d == nil && (name == "" || devs[i].Name == name) {
			d = &devs[i]
		}
	}
	if d == nil {
		t.Fatalf("Devices() does not list %s", name)
	}
	if d.NodeType == "" || d.Transport == "" || d.MaxQP == 0 || d.MaxCQE == 0 || d.MaxMRSize == 0 || len(d.Ports) == 0 {
		t.Errorf("%s: incomplete: %+v", d.Name, d)
	}
	active := false
	for _, p := range d.Ports {
		active = active || p.Active()
		if p.ActiveMTU < 256 || p.ActiveMTU > 4096 {
			t.Errorf("%s port %d: active MTU %d", d.Name, p.Num, p.ActiveMTU)
		}
	}
	if !active {
		t.Errorf("%s has no ACTIVE port", d.Name)
	}
	if d.IWARP() {
		if d.NodeType != "RNIC" {
			t.Errorf("%s is iWARP but its node type is %q, want RNIC", d.Name, d.NodeType)
		}
		return
	}
	ip := os.Getenv("RDMA_VM_IP")
	p := d.Ports[0]
	if ip == "" || p.LinkLayer != "Ethernet" {
		return
	}
	want := netip.MustParseAddr(ip).As16()
	for _, g := range p.GIDs {
		if g.GID == want {
			if g.Index != 1 || g.Type != "RoCE v2" || !g.IPv4Mapped || g.Netdev == "" {
				t.Errorf("GID of %s: %+v, want index 1, RoCE v2, IPv4-mapped, with a netdev", ip, g)
			}
			if got := g.String(); got != "0000:0000:0000:0000:0000:ffff:0a00:0001" && ip == "10.0.0.1" {
				t.Errorf("GID string %q", got)
			}
			return
		}
	}
	t.Errorf("%s port 1 has no GID ::ffff:%s: %+v", d.Name, ip, p.GIDs)
}

// TestHandles exercises open, PD and MR on mmap'd memory, and the rules of
// Close: idempotent, nil-safe, children first, ErrClosed afterwards.
func TestHandles(t *testing.T) {
	d := openTestDevice(t)
	if d.ctx.Name() != d.info.Name || d.ctx.Transport() != d.info.Transport {
		t.Errorf("Name() %q Transport() %q, QueryDevice %q %q", d.ctx.Name(), d.ctx.Transport(), d.info.Name, d.info.Transport)
	}
	if _, err := d.ctx.QueryPort(0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("QueryPort(0) = %v, want EINVAL", err)
	}
	if d.gid.Index >= 0 && len(d.port.GIDs) > 0 {
		g, err := d.ctx.QueryGID(d.port.Num, d.gid.Index)
		if err != nil || g != d.gid.GID {
			t.Errorf("QueryGID(%d, %d) = %x, %v; want %x", d.port.Num, d.gid.Index, g, err, d.gid.GID)
		}
	}
	before := Live()
	pd, err := d.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if pd.Context() != d.ctx {
		t.Error("PD.Context() is not the context")
	}
	buf := mmap(t, 4<<20)
	mr, err := pd.RegMR(buf, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Len != len(buf) || mr.Addr == 0 || mr.LKey == 0 && mr.RKey == 0 {
		t.Errorf("MR %+v", mr)
	}
	if sge := mr.SGE(4096, 100); sge.Addr != uint64(mr.Addr)+4096 || sge.Len != 100 || sge.LKey != mr.LKey {
		t.Errorf("SGE %+v", sge)
	}
	if got := Live(); got.PDs != before.PDs+1 || got.MRs != before.MRs+1 {
		t.Errorf("Live() = %v after a PD and an MR, before %v", got, before)
	}
	if _, err := pd.RegMR(nil, allAccess); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RegMR(nil) = %v, want EINVAL", err)
	}
	// Parents refuse to close before their children.
	if err := d.ctx.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("Context.Close with a PD open = %v, want EBUSY", err)
	}
	if err := pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("PD.Close with an MR open = %v, want EBUSY", err)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Close(); err != nil {
		t.Errorf("second MR.Close = %v", err)
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Close(); err != nil {
		t.Errorf("second PD.Close = %v", err)
	}
	if _, err := pd.RegMR(buf, allAccess); !errors.Is(err, ErrClosed) {
		t.Errorf("RegMR on a closed PD = %v, want ErrClosed", err)
	}
	var nilQP *QP
	var nilCQ *CQ
	if nilQP.Close() != nil || nilCQ.Close() != nil || (*MR)(nil).Close() != nil {
		t.Error("Close on nil failed")
	}
	if _, err := nilQP.PostSend([]SendWR{{}}); !errors.Is(err, ErrClosed) {
		t.Errorf("PostSend on nil = %v, want ErrClosed", err)
	}
	if got := Live(); got != before {
		t.Errorf("Live() = %v after closing, want %v", got, before)
	}
}

// TestManualRC connects two RC QPs by hand (RoCE, InfiniBand) and runs the
// data-path tests. On iWARP it checks that ToRTR refuses, and skips: TestCM
// covers iWARP.
func TestManualRC(t *testing.T) {
	d := openTestDevice(t)
	if d.info.IWARP() {
		pd, err := d.ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		defer pd.Close()
		cq, err := d.ctx.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cq.Close()
		qp, err := pd.CreateQP(QPInitAttr{SendCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Close()
		if err := qp.ToInit(d.port.Num, allAccess); err != nil {
			t.Fatal(err)
		}
		if err := qp.ToRTR(RTRAttr{RemoteQPN: qp.Num()}); !errors.Is(err, ErrNotSupported) {
			t.Errorf("ToRTR on iWARP = %v, want ErrNotSupported", err)
		}
		t.Skipf("%s is iWARP: QPs connect through rdma_cm (TestCM)", d.info.Name)
	}
	p := newManualPair(t, d, pairOpts{})
	testDataPath(t, p)
}

// TestManualRCErrors: a wrong rkey and an address outside the MR fail with
// a remote access error, and the QP goes to the error state.
func TestManualRCErrors(t *testing.T) {
	d := openTestDevice(t)
	if d.info.IWARP() {
		t.Skipf("%s is iWARP: TestCMErrors covers it", d.info.Name)
	}
	testRemoteAccess(t, func(tb testing.TB) *pair { return newManualPair(tb, d, pairOpts{}) })
}

// TestCM connects two QPs through the kernel's rdma_cm (the only way on
// iWARP; RoCE too) and runs the data-path tests.
func TestCM(t *testing.T) {
	p := newCMPair(t, openTestDevice(t), pairOpts{})
	testDataPath(t, p)
}

// TestCMErrors: remote access errors on QPs connected through rdma_cm.
func TestCMErrors(t *testing.T) {
	d := openTestDevice(t)
	if d.info.IWARP() {
		testRemoteAccessIWARP(t, d)
		return
	}
	testRemoteAccess(t, func(tb testing.TB) *pair { return newCMPair(tb, d, pairOpts{}) })
}

// testRemoteAccessIWARP: on iWARP a bad access is detected by the responder,
// which sends a TERMINATE and drops the connection. RDMA WRITEs are not
// acknowledged, so a bad WRITE completes successfully at the requester; what
// shows is the responder's receives being flushed and both ends getting
// DISCONNECTED. A bad READ completes with an error (siw on Linux 6.1 reports
// "flushed", not the TERMINATE's "remote access error"), and both ends get
// DISCONNECTED. Work posted after that never completes on siw.
func testRemoteAccessIWARP(t *testing.T, d *testDevice) {
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
			p := newCMPair(t, d, pairOpts{})
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
			p.cm.Dropped(t) // the TERMINATE took the connection down
		})
	}
}

// TestSRQ receives through a shared receive queue.
func TestSRQ(t *testing.T) {
	p := newPair(t, pairOpts{srq: true})
	if p.srq.MaxWR() < 64 {
		t.Errorf("SRQ granted %d WRs, asked for 64", p.srq.MaxWR())
	}
	if _, err := p.b.PostRecv([]RecvWR{{ID: 1}}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("PostRecv on a QP with an SRQ = %v, want EINVAL", err)
	}
	const n = 8
	var rwrs []RecvWR
	for i := range n {
		rwrs = append(rwrs, RecvWR{ID: 0x900 + uint64(i), SGE: p.mrB.SGE(i*4096, 4096)})
	}
	p.postRecvB(t, rwrs...)
	fill(p.bufA[:n*4096], 9)
	for i := range n {
		postSend(t, p.a, SendWR{ID: 0x910 + uint64(i), Op: OpSend, Flags: FlagSignaled, SGE: p.mrA.SGE(i*4096, 1000+i)})
	}
	for i := range n {
		waitWC(t, p.cqA, 0x910+uint64(i), true)
		wc := waitWC(t, p.cqB, 0x900+uint64(i), true)
		if wc.Opcode != WCRecv || wc.ByteLen != uint32(1000+i) || wc.QPNum != p.b.Num() {
			t.Errorf("receive %d: %+v", i, wc)
		}
		if !bytes.Equal(p.bufB[i*4096:i*4096+1000+i], p.bufA[i*4096:i*4096+1000+i]) {
			t.Errorf("receive %d: data differs", i)
		}
	}
}

// testDataPath runs the data-path checks on a connected pair.
func testDataPath(t *testing.T, p *pair) {
	t.Run("Write", func(t *testing.T) {
		fill(p.bufA[:64<<10], 1)
		postSend(t, p.a, SendWR{ID: 0x100, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64<<10),
			RemoteAddr: uint64(p.mrB.Addr) + 128<<10, RKey: p.mrB.RKey})
		if wc := waitWC(t, p.cqA, 0x100, true); wc.Opcode != WCRDMAWrite || wc.QPNum != p.a.Num() {
			t.Errorf("WRITE completion %+v", wc)
		}
		if !bytes.Equal(p.bufB[128<<10:192<<10], p.bufA[:64<<10]) {
			t.Error("RDMA WRITE: data differs")
		}
	})
	t.Run("Read", func(t *testing.T) {
		fill(p.bufB[256<<10:320<<10], 2)
		postSend(t, p.a, SendWR{ID: 0x200, Op: OpRead, Flags: FlagSignaled, SGE: p.mrA.SGE(256<<10, 64<<10),
			RemoteAddr: uint64(p.mrB.Addr) + 256<<10, RKey: p.mrB.RKey})
		if wc := waitWC(t, p.cqA, 0x200, true); wc.Opcode != WCRDMARead {
			t.Errorf("READ completion %+v", wc)
		}
		if !bytes.Equal(p.bufA[256<<10:320<<10], p.bufB[256<<10:320<<10]) {
			t.Error("RDMA READ: data differs")
		}
	})
	t.Run("SendRecv", func(t *testing.T) {
		p.postRecvB(t, RecvWR{ID: 0x300, SGE: p.mrB.SGE(512<<10, 4096)})
		fill(p.bufA[512<<10:512<<10+3000], 3)
		postSend(t, p.a, SendWR{ID: 0x301, Op: OpSend, Flags: FlagSignaled, SGE: p.mrA.SGE(512<<10, 3000)})
		if wc := waitWC(t, p.cqA, 0x301, true); wc.Opcode != WCSend {
			t.Errorf("SEND completion %+v", wc)
		}
		wc := waitWC(t, p.cqB, 0x300, true)
		if wc.Opcode != WCRecv || wc.ByteLen != 3000 || wc.HasImm || wc.QPNum != p.b.Num() {
			t.Errorf("RECV completion %+v", wc)
		}
		if !bytes.Equal(p.bufB[512<<10:512<<10+3000], p.bufA[512<<10:512<<10+3000]) {
			t.Error("SEND: data differs")
		}
	})
	t.Run("WriteImm", func(t *testing.T) {
		if p.iwarp() {
			t.Skip("iWARP has no immediate data")
		}
		p.postRecvB(t, RecvWR{ID: 0x400})
		fill(p.bufA[600<<10:604<<10], 4)
		postSend(t, p.a, SendWR{ID: 0x401, Op: OpWriteImm, Flags: FlagSignaled, SGE: p.mrA.SGE(600<<10, 4096),
			RemoteAddr: uint64(p.mrB.Addr) + 600<<10, RKey: p.mrB.RKey, Imm: 0xdeadbeef})
		waitWC(t, p.cqA, 0x401, true)
		wc := waitWC(t, p.cqB, 0x400, true)
		if wc.Opcode != WCRecvRDMAWithImm || !wc.HasImm || wc.Imm != 0xdeadbeef {
			t.Errorf("RECV_RDMA_WITH_IMM completion %+v", wc)
		}
		if !bytes.Equal(p.bufB[600<<10:604<<10], p.bufA[600<<10:604<<10]) {
			t.Error("RDMA WRITE with immediate: data differs")
		}
	})
	t.Run("SendImm", func(t *testing.T) {
		if p.iwarp() {
			t.Skip("iWARP has no immediate data")
		}
		p.postRecvB(t, RecvWR{ID: 0x500, SGE: p.mrB.SGE(640<<10, 4096)})
		postSend(t, p.a, SendWR{ID: 0x501, Op: OpSendImm, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 100), Imm: 0x12345678})
		waitWC(t, p.cqA, 0x501, true)
		wc := waitWC(t, p.cqB, 0x500, true)
		if wc.Opcode != WCRecv || !wc.HasImm || wc.Imm != 0x12345678 || wc.ByteLen != 100 {
			t.Errorf("RECV with immediate: %+v", wc)
		}
	})
	t.Run("Batch64", func(t *testing.T) {
		const n, size = 64, 4096
		fill(p.bufA[:n*size], 5)
		clear(p.bufB[:n*size])
		wrs := make([]SendWR, n)
		for i := range wrs {
			wrs[i] = SendWR{ID: 0x1000 + uint64(i), Op: OpWrite, SGE: p.mrA.SGE(i*size, size),
				RemoteAddr: uint64(p.mrB.Addr) + uint64(i*size), RKey: p.mrB.RKey}
		}
		wrs[n-1].Flags = FlagSignaled // selective signalling: only the last
		posted, err := p.a.PostSend(wrs)
		if err != nil || posted != n {
			t.Fatalf("PostSend(64) = %d, %v", posted, err)
		}
		waitWC(t, p.cqA, 0x1000+n-1, true)
		noWC(t, p.cqA)
		placed(t, p)
		if !bytes.Equal(p.bufB[:n*size], p.bufA[:n*size]) {
			t.Error("64 RDMA WRITEs: data differs")
		}
	})
	t.Run("LongBatch", func(t *testing.T) {
		// Longer than the 256-WR ring: still one cgo call, posted as two chains.
		const n, size = 300, 512
		if p.a.Caps().MaxSendWR < n {
			t.Skipf("the send queue holds %d WRs", p.a.Caps().MaxSendWR)
		}
		fill(p.bufA[:n*size], 7)
		clear(p.bufB[:n*size])
		wrs := make([]SendWR, n)
		for i := range wrs {
			wrs[i] = SendWR{ID: 0x2000 + uint64(i), Op: OpWrite, SGE: p.mrA.SGE(i*size, size),
				RemoteAddr: uint64(p.mrB.Addr) + uint64(i*size), RKey: p.mrB.RKey}
		}
		wrs[n-1].Flags = FlagSignaled
		if posted, err := p.a.PostSend(wrs); err != nil || posted != n {
			t.Fatalf("PostSend(%d) = %d, %v", n, posted, err)
		}
		waitWC(t, p.cqA, 0x2000+n-1, true)
		noWC(t, p.cqA)
		placed(t, p)
		if !bytes.Equal(p.bufB[:n*size], p.bufA[:n*size]) {
			t.Errorf("%d RDMA WRITEs: data differs", n)
		}
	})
	t.Run("Inline", func(t *testing.T) {
		max := p.a.Caps().MaxInline
		if max == 0 {
			t.Skip("the provider granted no inline data")
		}
		n := min(max, 64)
		p.postRecvB(t, RecvWR{ID: 0x600, SGE: p.mrB.SGE(700<<10, 4096)})
		fill(p.bufA[700<<10:700<<10+n], 6)
		postSend(t, p.a, SendWR{ID: 0x601, Op: OpSend, Flags: FlagSignaled | FlagInline, SGE: p.mrA.SGE(700<<10, n)})
		waitWC(t, p.cqA, 0x601, true)
		if wc := waitWC(t, p.cqB, 0x600, true); wc.ByteLen != uint32(n) {
			t.Errorf("inline SEND: received %d bytes, want %d", wc.ByteLen, n)
		}
		if !bytes.Equal(p.bufB[700<<10:700<<10+n], p.bufA[700<<10:700<<10+n]) {
			t.Error("inline SEND: data differs")
		}
	})
	t.Run("CompChannel", func(t *testing.T) {
		if _, err := p.ch.GetEventTimeout(20 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("GetEventTimeout on an idle channel = %v, want ErrDeadlineExceeded", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.ch.WaitEvent(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("WaitEvent with a canceled context = %v, want context.Canceled", err)
		}
		if err := p.cqA.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		postSend(t, p.a, SendWR{ID: 0x700, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 8),
			RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey})
		cq, err := p.ch.GetEventTimeout(waitTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if cq != p.cqA {
			t.Fatalf("event for %p, want cqA %p", cq, p.cqA)
		}
		cq.AckEvents(1)
		waitWC(t, p.cqA, 0x700, true)
		// An event left unacknowledged is acked by Close (or destroy would hang).
		if err := p.cqA.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		postSend(t, p.a, SendWR{ID: 0x701, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 8),
			RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey})
		if _, err := p.ch.GetEventTimeout(waitTimeout); err != nil {
			t.Fatal(err)
		}
		waitWC(t, p.cqA, 0x701, true)
	})
	t.Run("ZeroAllocs", func(t *testing.T) {
		wrs := []SendWR{{ID: 0x800, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
			RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey}}
		wcs := make([]WC, 16)
		spin := func(cq *CQ) {
			for i := 0; ; i++ {
				n, err := cq.Poll(wcs)
				if err != nil || n > 0 && wcs[0].Status != WCSuccess {
					panic("poll failed")
				}
				if n > 0 {
					return
				}
				if i > 1e9 {
					panic("no completion")
				}
			}
		}
		allocs := testing.AllocsPerRun(200, func() {
			if _, err := p.a.PostSend(wrs); err != nil {
				panic(err)
			}
			spin(p.cqA)
		})
		if allocs != 0 {
			t.Errorf("PostSend+Poll of a WRITE: %v allocations per run, want 0", allocs)
		}
		send := []SendWR{{ID: 0x801, Op: OpSend, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64)}}
		recv := []RecvWR{{ID: 0x802, SGE: p.mrB.SGE(0, 64)}}
		allocs = testing.AllocsPerRun(200, func() {
			if p.srq != nil {
				if err := p.srq.PostRecv(recv); err != nil {
					panic(err)
				}
			} else if _, err := p.b.PostRecv(recv); err != nil {
				panic(err)
			}
			if _, err := p.a.PostSend(send); err != nil {
				panic(err)
			}
			spin(p.cqA)
			spin(p.cqB)
		})
		if allocs != 0 {
			t.Errorf("PostRecv+PostSend+Poll of a SEND: %v allocations per run, want 0", allocs)
		}
	})
	t.Run("BadWR", func(t *testing.T) {
		wrs := []SendWR{
			{ID: 0xa00, Op: OpWrite, SGE: p.mrA.SGE(0, 8), RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey},
			{ID: 0xa01, Op: Opcode(99)},
		}
		n, err := p.a.PostSend(wrs)
		var pe *PostError
		if n != 0 || !errors.As(err, &pe) || pe.Bad != 1 || pe.BadID != 0xa01 || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("PostSend with a bad opcode = %d, %v; want 0 and a PostError for WR 1", n, err)
		}
		noWC(t, p.cqA)
	})
}

// testRemoteAccess checks a wrong rkey and an out-of-range address, each on
// a fresh pair since the QP ends in the error state.
func testRemoteAccess(t *testing.T, newPair func(testing.TB) *pair) {
	for _, c := range []struct {
		name string
		wr   func(p *pair) SendWR
	}{
		{"WrongRKey", func(p *pair) SendWR {
			rkey := p.mrB.RKey ^ 0x5a5a00
			if rkey == p.mrA.RKey {
				rkey ^= 0x10000
			}
			return SendWR{ID: 0xe00, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
				RemoteAddr: uint64(p.mrB.Addr), RKey: rkey}
		}},
		{"OutOfRange", func(p *pair) SendWR {
			return SendWR{ID: 0xe00, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
				RemoteAddr: uint64(p.mrB.Addr) + uint64(p.mrB.Len), RKey: p.mrB.RKey}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t)
			postSend(t, p.a, c.wr(p))
			wc := waitWC(t, p.cqA, 0xe00, false)
			err := wc.Err()
			if !errors.Is(err, ErrRemoteAccess) {
				t.Errorf("completion %v (%+v), want a remote access error", err, wc)
			} else {
				t.Logf("completion: %v", err)
			}
			deadline := time.Now().Add(waitTimeout)
			for !p.noQPState {
				s, err := p.a.State()
				if err != nil {
					t.Fatal(err)
				}
				if s == QPSErr {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("QP state %v after a remote access error, want ERR", s)
				}
				time.Sleep(time.Millisecond)
			}
			// Work posted to a QP in the error state is flushed.
			n, perr := p.a.PostSend([]SendWR{{ID: 0xe01, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 8),
				RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey}})
			if perr != nil || n != 1 {
				t.Logf("posting to a QP in ERR: %d, %v", n, perr)
				return
			}
			if wc := waitWC(t, p.cqA, 0xe01, false); !errors.Is(wc.Err(), ErrFlushed) {
				t.Errorf("WR posted in ERR: %v, want flushed", wc.Err())
			}
		})
	}
}

// BenchmarkPostPoll posts one signaled 64-byte RDMA WRITE and polls its
// completion per op: the round trip of the data path through cgo. Run with
// -benchmem: it allocates nothing. (Under rdma-vm the numbers measure TCG,
// not a NIC.)
func BenchmarkPostPoll(b *testing.B) {
	p := newPair(b, pairOpts{})
	wrs := []SendWR{{ID: 1, Op: OpWrite, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64),
		RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey}}
	wcs := make([]WC, 16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.a.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for n := 0; n == 0; {
			var err error
			if n, err = p.cqA.Poll(wcs); err != nil || n > 0 && wcs[0].Status != WCSuccess {
				b.Fatal(err, wcs[0].Status)
			}
		}
	}
}

// BenchmarkPostPollBatch64 posts 64 RDMA WRITEs of 4 KiB in one call, only
// the last signaled, and polls the one completion; it reports WRs/s.
func BenchmarkPostPollBatch64(b *testing.B) {
	p := newPair(b, pairOpts{})
	const n = 64
	wrs := make([]SendWR, n)
	for i := range wrs {
		wrs[i] = SendWR{ID: uint64(i), Op: OpWrite, SGE: p.mrA.SGE(i*4096, 4096),
			RemoteAddr: uint64(p.mrB.Addr) + uint64(i*4096), RKey: p.mrB.RKey}
	}
	wrs[n-1].Flags = FlagSignaled
	wcs := make([]WC, 16)
	b.ReportAllocs()
	b.SetBytes(n * 4096)
	start := time.Now()
	for b.Loop() {
		if _, err := p.a.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		for k := 0; k == 0; {
			var err error
			if k, err = p.cqA.Poll(wcs); err != nil || k > 0 && wcs[0].Status != WCSuccess {
				b.Fatal(err, wcs[0].Status)
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/time.Since(start).Seconds(), "WRs/s")
}

// placed waits until the WRITEs posted before it are in the responder's
// memory. On RoCE a WRITE completes once the responder acknowledged it; on
// iWARP once it was handed to TCP. A READ on the same QP returns only after
// the responder placed the WRITEs before it, so a zero-length READ is the
// fence.
func placed(t *testing.T, p *pair) {
	t.Helper()
	wr := []SendWR{{ID: 0x7777, Op: OpRead, Flags: FlagSignaled, RemoteAddr: uint64(p.mrB.Addr), RKey: p.mrB.RKey}}
	if _, err := p.a.PostSend(wr); err != nil {
		t.Fatalf("fence READ: %v", err)
	}
	waitWC(t, p.cqA, 0x7777, true)
}

//go:build cgo

package ibv

import (
	"errors"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/testutil"
)

// waitTimeout bounds every wait for a completion or an event: the VM runs
// under TCG and is slow, but nothing here takes seconds when it works.
const waitTimeout = 20 * time.Second

// testDevice is the device the verbs tests run on: XFER_TEST_DEVICE, or the
// first one.
type testDevice struct {
	ctx  *Context
	info DeviceInfo
	port PortInfo
	gid  GIDInfo // the GID QPs connect with (RoCE v2 IPv4 if there is one)
}

func openTestDevice(tb testing.TB) *testDevice {
	tb.Helper()
	name := testutil.RequireVerbs(tb)
	if err := Load(); err != nil {
		testutil.SkipOrFail(tb, err.Error())
	}
	ctx, err := Open(name)
	if errors.Is(err, ErrNoDevice) {
		testutil.SkipOrFail(tb, err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			tb.Error(err)
		}
	})
	info, err := ctx.QueryDevice()
	if err != nil {
		tb.Fatal(err)
	}
	d := &testDevice{ctx: ctx, info: info}
	for _, p := range info.Ports {
		if p.Active() {
			d.port = p
			break
		}
	}
	if d.port.Num == 0 {
		testutil.SkipOrFail(tb, "no ACTIVE port on "+info.Name)
	}
	d.gid = pickGID(d.port)
	return d
}

// pickGID prefers a RoCE v2 GID of an IPv4 address, then any.
func pickGID(p PortInfo) GIDInfo {
	for _, g := range p.GIDs {
		if g.Type == "RoCE v2" && g.IPv4Mapped {
			return g
		}
	}
	if len(p.GIDs) > 0 {
		return p.GIDs[0]
	}
	return GIDInfo{}
}

// mmap returns size bytes of anonymous memory, unmapped when the test ends
// (after the MRs registered later are closed: cleanups run last-in first-out).
func mmap(tb testing.TB, size int) []byte {
	tb.Helper()
	b, err := sys.MmapAnon(size, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := sys.Munmap(b); err != nil {
			tb.Error(err)
		}
	})
	return b
}

const bufSize = 1 << 20

const allAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead

// pair is two connected RC QPs on one device: a (on cqA, which reports to
// ch) and b (on cqB, receiving through srq if it is set).
type pair struct {
	tb         testing.TB
	ctx        *Context
	info       DeviceInfo
	pd         *PD
	ch         *CompChannel
	cqA, cqB   *CQ
	srq        *SRQ
	a, b       *QP
	bufA, bufB []byte
	mrA, mrB   *MR

	// noQPState: the provider does not report QP states (siw on Linux 6.1
	// answers RESET to every ibv_query_qp; 6.12 reports them).
	noQPState bool
	// cm is the rdma_cm connection of a newCMPair, closed before the QPs.
	cm CMConn
}

// CMConn is a connection that ConnectCM made.
type CMConn interface {
	// Dropped waits until both ends have reported DISCONNECTED for a
	// connection that the peer or the fabric took down (an iWARP
	// TERMINATE), so that Close does not disconnect it again.
	Dropped(tb testing.TB)
	// Close disconnects (unless dropped) and closes the rdma_cm IDs and
	// channels; the QPs stay the caller's.
	Close()
}

// ConnectCM connects the QPs a and b (both on ctx, in RESET) to each other
// through the kernel's rdma_cm, with rd RDMA READs outstanding at most. It
// is set by cm_linux_test.go (package ibv_test), which may import
// internal/rdmacm; this package cannot, since internal/rdmacm imports it.
var ConnectCM func(tb testing.TB, ctx *Context, a, b *QP, rd int) CMConn

type pairOpts struct {
	srq bool // b receives through an SRQ
}

func (p *pair) iwarp() bool { return p.info.IWARP() }

// setup allocates the PD, MRs, channel and CQs on ctx.
func (p *pair) setup(ctx *Context, opts pairOpts) {
	tb := p.tb
	tb.Helper()
	p.ctx = ctx
	var err error
	if p.pd, err = ctx.AllocPD(); err != nil {
		tb.Fatal(err)
	}
	if p.mrA, err = p.pd.RegMR(p.bufA, allAccess); err != nil {
		tb.Fatal(err)
	}
	if p.mrB, err = p.pd.RegMR(p.bufB, allAccess); err != nil {
		tb.Fatal(err)
	}
	if p.ch, err = ctx.CreateCompChannel(); err != nil {
		tb.Fatal(err)
	}
	if p.cqA, err = ctx.CreateCQ(512, p.ch); err != nil {
		tb.Fatal(err)
	}
	if p.cqB, err = ctx.CreateCQ(512, nil); err != nil {
		tb.Fatal(err)
	}
	if opts.srq {
		if p.srq, err = p.pd.CreateSRQ(64, 1); err != nil {
			tb.Fatal(err)
		}
	}
}

func (p *pair) attrA() QPInitAttr {
	return QPInitAttr{SendCQ: p.cqA, MaxSendWR: 512, MaxRecvWR: 256, MaxInline: 64}
}

func (p *pair) attrB() QPInitAttr {
	return QPInitAttr{SendCQ: p.cqB, SRQ: p.srq, MaxSendWR: 256, MaxRecvWR: 256, MaxInline: 64}
}

// newPair connects by hand on RoCE and InfiniBand, through rdma_cm
// (ConnectCM) on iWARP.
func newPair(tb testing.TB, opts pairOpts) *pair {
	tb.Helper()
	d := openTestDevice(tb)
	if d.info.IWARP() {
		return newCMPair(tb, d, opts)
	}
	return newManualPair(tb, d, opts)
}

// newQPs creates the resources of a pair on d (see setup) and its two QPs,
// in RESET, for newCMPair or newManualPair to connect. The test's end
// closes them.
func newQPs(tb testing.TB, d *testDevice, opts pairOpts) *pair {
	tb.Helper()
	p := &pair{tb: tb, info: d.info, bufA: mmap(tb, bufSize), bufB: mmap(tb, bufSize)}
	tb.Cleanup(p.close)
	p.setup(d.ctx, opts)
	var err error
	if p.a, err = p.pd.CreateQP(p.attrA()); err != nil {
		tb.Fatal(err)
	}
	if p.b, err = p.pd.CreateQP(p.attrB()); err != nil {
		tb.Fatal(err)
	}
	return p
}

// newCMPair connects two QPs of d through the kernel's rdma_cm.
func newCMPair(tb testing.TB, d *testDevice, opts pairOpts) *pair {
	tb.Helper()
	if ConnectCM == nil {
		tb.Fatal("ConnectCM is not set: cm_linux_test.go sets it")
	}
	p := newQPs(tb, d, opts)
	p.cm = ConnectCM(tb, d.ctx, p.a, p.b, min(16, p.info.MaxQPRdAtom, p.info.MaxQPInitRdAtom))
	for _, q := range []*QP{p.a, p.b} {
		s, err := q.State()
		if err == nil && s == QPSReset && p.iwarp() {
			tb.Logf("%s does not report QP states (siw on older kernels such as 6.1): ibv_query_qp says RESET", p.info.Name)
			p.noQPState = true
			continue
		}
		if err != nil || s != QPSRTS {
			tb.Fatalf("QP %#x after ESTABLISHED: state %v, %v; want RTS", q.Num(), s, err)
		}
	}
	return p
}

// newManualPair connects two QPs of d by hand: INIT, RTR (with the GID on
// RoCE and the LID on InfiniBand, path MTU the smaller active MTU), RTS.
func newManualPair(tb testing.TB, d *testDevice, opts pairOpts) *pair {
	tb.Helper()
	p := newQPs(tb, d, opts)
	for _, q := range []*QP{p.a, p.b} {
		if s, err := q.State(); err != nil || s != QPSReset {
			tb.Fatalf("new QP %#x: state %v, %v; want RESET", q.Num(), s, err)
		}
		if err := q.ToInit(d.port.Num, allAccess); err != nil {
			tb.Fatal(err)
		}
	}
	// Both ends are on this port; a real peer sends its own MTU.
	pa, err := d.ctx.QueryPort(d.port.Num)
	if err != nil {
		tb.Fatal(err)
	}
	mtu := min(pa.ActiveMTU, d.port.ActiveMTU)
	eth := d.port.LinkLayer == "Ethernet"
	for _, c := range []struct{ q, peer *QP }{{p.a, p.b}, {p.b, p.a}} {
		rtr := RTRAttr{
			RemoteQPN: c.peer.Num(),
			RemotePSN: c.peer.Num() & 0xffffff,
			PathMTU:   mtu,
			Port:      d.port.Num,
			DLID:      d.port.LID,
			IsGlobal:  eth,
			DGID:      d.gid.GID,
			SGIDIndex: d.gid.Index,
		}
		if err := c.q.ToRTR(rtr); err != nil {
			tb.Fatal(err)
		}
		if err := c.q.ToRTS(RTSAttr{PSN: c.q.Num() & 0xffffff}); err != nil {
			tb.Fatal(err)
		}
		if s, err := c.q.State(); err != nil || s != QPSRTS {
			tb.Fatalf("QP %#x: state %v, %v; want RTS", c.q.Num(), s, err)
		}
	}
	return p
}

// close tears the pair down in the documented order, checking each Close.
func (p *pair) close() {
	tb := p.tb
	check := func(err error) {
		if err != nil {
			tb.Error(err)
		}
	}
	if p.cm != nil {
		p.cm.Close()
	}
	check(p.a.Close())
	check(p.b.Close())
	check(p.srq.Close())
	check(p.cqA.Close())
	check(p.cqB.Close())
	check(p.ch.Close())
	check(p.mrA.Close())
	check(p.mrB.Close())
	check(p.pd.Close())
}

// waitWC polls cq until a completion with id arrives and returns it; any
// other completion, or a failed one when ok is set, fails the test.
func waitWC(tb testing.TB, cq *CQ, id uint64, ok bool) WC {
	tb.Helper()
	wcs := make([]WC, 1)
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wcs)
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		wc := wcs[0]
		if wc.ID != id {
			tb.Fatalf("completion %#x (%v, %v), want %#x", wc.ID, wc.Opcode, wc.Status, id)
		}
		if ok && wc.Status != WCSuccess {
			tb.Fatalf("completion %#x: %v", id, wc.Err())
		}
		return wc
	}
	tb.Fatalf("no completion %#x within %v", id, waitTimeout)
	return WC{}
}

// noWC checks that cq has no completion.
func noWC(tb testing.TB, cq *CQ) {
	tb.Helper()
	wcs := make([]WC, 4)
	if n, err := cq.Poll(wcs); err != nil || n != 0 {
		tb.Fatalf("unexpected completions: %v %v", wcs[:n], err)
	}
}

func postSend(tb testing.TB, qp *QP, wrs ...SendWR) {
	tb.Helper()
	n, err := qp.PostSend(wrs)
	if err != nil || n != len(wrs) {
		tb.Fatalf("PostSend: %d of %d, %v", n, len(wrs), err)
	}
}

func (p *pair) postRecvB(tb testing.TB, wrs ...RecvWR) {
	tb.Helper()
	if p.srq != nil {
		if err := p.srq.PostRecv(wrs); err != nil {
			tb.Fatal(err)
		}
		return
	}
	n, err := p.b.PostRecv(wrs)
	if err != nil || n != len(wrs) {
		tb.Fatalf("PostRecv: %d of %d, %v", n, len(wrs), err)
	}
}

// fill writes a pattern that depends on seed and the offset.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>8)
	}
}

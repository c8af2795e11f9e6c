package rdmacm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/testutil"
)

// TestABI checks the offsets and sizes of the kernel's rdma_cm ABI that
// Channel writes by hand against <rdma/rdma_user_cm.h>. It needs a C
// compiler and the header (libibverbs-dev); without them it skips, or fails
// with XFER_REQUIRE_VERBS=1.
func TestABI(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		testutil.SkipOrFail(t, "no C compiler ("+cc+") to check the rdma_cm ABI")
	}
	dir := t.TempDir()
	items := []struct {
		expr string
		want int
	}{
		{"sizeof(struct rdma_ucm_cmd_hdr)", ucmaHdrLen},
		{"RDMA_USER_CM_CMD_CREATE_ID", ucmaCmdCreateID},
		{"RDMA_USER_CM_CMD_DESTROY_ID", ucmaCmdDestroyID},
		{"RDMA_USER_CM_CMD_RESOLVE_ROUTE", ucmaCmdResolveRoute},
		{"RDMA_USER_CM_CMD_CONNECT", ucmaCmdConnect},
		{"RDMA_USER_CM_CMD_LISTEN", ucmaCmdListen},
		{"RDMA_USER_CM_CMD_ACCEPT", ucmaCmdAccept},
		{"RDMA_USER_CM_CMD_REJECT", ucmaCmdReject},
		{"RDMA_USER_CM_CMD_DISCONNECT", ucmaCmdDisconnect},
		{"RDMA_USER_CM_CMD_INIT_QP_ATTR", ucmaCmdInitQPAttr},
		{"RDMA_USER_CM_CMD_GET_EVENT", ucmaCmdGetEvent},
		{"RDMA_USER_CM_CMD_QUERY", ucmaCmdQuery},
		{"RDMA_USER_CM_CMD_BIND", ucmaCmdBind},
		{"RDMA_USER_CM_CMD_RESOLVE_ADDR", ucmaCmdResolveAddr},
		{"RDMA_PS_TCP", rdmaPSTCP},
		{"RDMA_USER_CM_QUERY_ADDR", 0},
		{"sizeof(struct rdma_ucm_create_id)", ucmaCreateIDLen},
		{"offsetof(struct rdma_ucm_create_id, response)", 8},
		{"offsetof(struct rdma_ucm_create_id, ps)", 16},
		{"offsetof(struct rdma_ucm_create_id, qp_type)", 18},
		{"sizeof(struct rdma_ucm_create_id_resp)", 4},
		{"sizeof(struct rdma_ucm_destroy_id)", ucmaDestroyIDLen},
		{"offsetof(struct rdma_ucm_destroy_id, response)", 0},
		{"offsetof(struct rdma_ucm_destroy_id, id)", 8},
		{"sizeof(struct rdma_ucm_destroy_id_resp)", 4},
		{"sizeof(struct rdma_ucm_bind)", ucmaBindLen},
		{"offsetof(struct rdma_ucm_bind, id)", 0},
		{"offsetof(struct rdma_ucm_bind, addr_size)", 4},
		{"offsetof(struct rdma_ucm_bind, addr)", 8},
		{"sizeof(struct rdma_ucm_resolve_addr)", ucmaResolveAddrLen},
		{"offsetof(struct rdma_ucm_resolve_addr, timeout_ms)", 4},
		{"offsetof(struct rdma_ucm_resolve_addr, src_size)", 8},
		{"offsetof(struct rdma_ucm_resolve_addr, dst_size)", 10},
		{"offsetof(struct rdma_ucm_resolve_addr, src_addr)", ucmaResolveAddrSrc},
		{"offsetof(struct rdma_ucm_resolve_addr, dst_addr)", ucmaResolveAddrDst},
		{"sizeof(struct rdma_ucm_resolve_route)", ucmaResolveRouteLen},
		{"offsetof(struct rdma_ucm_resolve_route, timeout_ms)", 4},
		{"sizeof(struct rdma_ucm_query)", ucmaQueryLen},
		{"offsetof(struct rdma_ucm_query, id)", 8},
		{"offsetof(struct rdma_ucm_query, option)", 12},
		{"sizeof(struct rdma_ucm_query_addr_resp)", ucmaQueryAddrLen},
		{"offsetof(struct rdma_ucm_query_addr_resp, node_guid)", ucmaQueryNodeGUID},
		{"offsetof(struct rdma_ucm_query_addr_resp, port_num)", ucmaQueryPortNum},
		{"offsetof(struct rdma_ucm_query_addr_resp, src_addr)", ucmaQuerySrcAddr},
		{"offsetof(struct rdma_ucm_query_addr_resp, ibdev_index)", ucmaQueryIbdevIdx},
		{"sizeof(struct rdma_ucm_listen)", ucmaListenLen},
		{"offsetof(struct rdma_ucm_listen, backlog)", 4},
		{"sizeof(struct rdma_ucm_conn_param)", ucmaParamValid + 1},
		{"offsetof(struct rdma_ucm_conn_param, qp_num)", 0},
		{"offsetof(struct rdma_ucm_conn_param, private_data)", ucmaParamPData},
		{"sizeof(((struct rdma_ucm_conn_param *)0)->private_data)", ucmaMaxPData},
		{"offsetof(struct rdma_ucm_conn_param, private_data_len)", ucmaParamPDataLen},
		{"offsetof(struct rdma_ucm_conn_param, srq)", ucmaParamSRQ},
		{"offsetof(struct rdma_ucm_conn_param, responder_resources)", ucmaParamRespRes},
		{"offsetof(struct rdma_ucm_conn_param, initiator_depth)", ucmaParamInitDep},
		{"offsetof(struct rdma_ucm_conn_param, flow_control)", ucmaParamFlowCtl},
		{"offsetof(struct rdma_ucm_conn_param, retry_count)", ucmaParamRetry},
		{"offsetof(struct rdma_ucm_conn_param, rnr_retry_count)", ucmaParamRNRRetry},
		{"offsetof(struct rdma_ucm_conn_param, valid)", ucmaParamValid},
		{"sizeof(struct rdma_ucm_connect)", ucmaConnectLen},
		{"offsetof(struct rdma_ucm_connect, conn_param)", 0},
		{"offsetof(struct rdma_ucm_connect, id)", ucmaConnectID},
		{"sizeof(struct rdma_ucm_accept)", ucmaAcceptLen},
		{"offsetof(struct rdma_ucm_accept, uid)", 0},
		{"offsetof(struct rdma_ucm_accept, conn_param)", ucmaAcceptParam},
		{"offsetof(struct rdma_ucm_accept, id)", ucmaAcceptID},
		{"sizeof(struct rdma_ucm_reject)", ucmaRejectLen},
		{"offsetof(struct rdma_ucm_reject, private_data_len)", 4},
		{"offsetof(struct rdma_ucm_reject, private_data)", ucmaRejectPData},
		{"sizeof(struct rdma_ucm_disconnect)", ucmaDisconnectLen},
		{"sizeof(struct rdma_ucm_init_qp_attr)", ucmaInitQPAttrLen},
		{"offsetof(struct rdma_ucm_init_qp_attr, response)", 0},
		{"offsetof(struct rdma_ucm_init_qp_attr, id)", 8},
		{"offsetof(struct rdma_ucm_init_qp_attr, qp_state)", 12},
		{"offsetof(struct ib_uverbs_qp_attr, qp_attr_mask)", 0},
		{"sizeof(struct ib_uverbs_qp_attr) <= " + strconv.Itoa(ucmaRespLen), 1},
		{"sizeof(struct rdma_ucm_get_event)", ucmaGetEventLen},
		{"offsetof(struct rdma_ucm_event_resp, id)", ucmaEventID},
		{"offsetof(struct rdma_ucm_event_resp, event)", ucmaEventType},
		{"offsetof(struct rdma_ucm_event_resp, status)", ucmaEventStatus},
		{"offsetof(struct rdma_ucm_event_resp, param)", ucmaEventParam},
		{"sizeof(struct rdma_ucm_event_resp) <= " + strconv.Itoa(ucmaRespLen), 1},
	}
	var src bytes.Buffer
	src.WriteString("#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_user_cm.h>\n#include <rdma/ib_user_verbs.h>\nint main(void) {\n")
	for _, it := range items {
		fmt.Fprintf(&src, "\tprintf(\"%%lld\\n\", (long long)(%s));\n", it.expr)
	}
	src.WriteString("\treturn 0;\n}\n")
	prog := filepath.Join(dir, "kcmabi")
	if err := os.WriteFile(prog+".c", src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-o", prog, prog+".c").CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("rdma_user_cm.h")) {
			testutil.SkipOrFail(t, "<rdma/rdma_user_cm.h> is not installed (apt-get install libibverbs-dev): cannot check the rdma_cm ABI")
		}
		t.Fatalf("compiling the rdma_cm ABI probe: %v\n%s", err, out)
	}
	out, err := exec.Command(prog).Output()
	if err != nil {
		t.Fatalf("running the rdma_cm ABI probe: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for _, it := range items {
		if !sc.Scan() {
			t.Fatal("the probe printed too little")
		}
		got, _ := strconv.Atoi(sc.Text())
		if got != it.want {
			t.Errorf("%s: system header %d, package %d", it.expr, got, it.want)
		}
	}
}

// expectEvent waits for the next event on ch and checks its type.
func expectEvent(tb testing.TB, ch *Channel, want EventType) Event {
	tb.Helper()
	ev, err := ch.GetEvent(waitTimeout)
	if err != nil {
		tb.Fatalf("waiting for %v: %v", want, err)
	}
	if ev.Type != want {
		tb.Fatalf("got %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err(), want)
	}
	return ev
}

const waitTimeout = 20 * time.Second

// testDevice is the opened test device.
type testDevice struct {
	ctx  *ibv.Context
	info ibv.DeviceInfo
}

// openTestDevice opens the device the test runs on (XFER_TEST_DEVICE, else
// the first), or skips (fails under XFER_REQUIRE_VERBS=1).
func openTestDevice(tb testing.TB) *testDevice {
	tb.Helper()
	name := testutil.RequireVerbs(tb)
	if err := ibv.Load(); err != nil {
		testutil.SkipOrFail(tb, err.Error())
	}
	ctx, err := ibv.Open(name)
	if errors.Is(err, ibv.ErrNoDevice) {
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
	return &testDevice{ctx: ctx, info: info}
}

// closeAll closes what a test opened, in the order given, and fails the
// test on an error.
func closeAll(tb testing.TB, cs ...interface{ Close() error }) {
	tb.Helper()
	for _, c := range cs {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	}
}

// waitWC polls cq until the completion of the work request id arrives,
// and fails the test unless it succeeded.
func waitWC(tb testing.TB, cq *ibv.CQ, id uint64) ibv.WC {
	tb.Helper()
	wcs := make([]ibv.WC, 4)
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wcs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if err := wc.Err(); err != nil {
				tb.Fatalf("completion %#x: %v", wc.ID, err)
			}
			if wc.ID == id {
				return wc
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	tb.Fatalf("no completion of %#x within %v", id, waitTimeout)
	return ibv.WC{}
}

// TestConnect connects two QPs of the test device's own context through
// the kernel's rdma_cm (a listener and a connector in one process, each
// with its own channel, driven in one goroutine), the passive one
// receiving through a shared receive queue when srq is set, and moves data
// both ways: a SEND, an RDMA WRITE and an RDMA READ. It is the only test
// of an iWARP data path below transport/verbs, since iWARP QPs connect
// only through rdma_cm.
func TestConnect(t *testing.T) {
	for _, srq := range []bool{false, true} {
		t.Run(fmt.Sprintf("srq=%v", srq), func(t *testing.T) { testConnect(t, srq) })
	}
}

func testConnect(t *testing.T, useSRQ bool) {
	d := openTestDevice(t)
	addr := testutil.RequireRDMAAddr(t)
	const size = 1 << 16
	bufA, bufB := mmap(t, size), mmap(t, size)
	srv, err := NewChannel()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := NewChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, cli, srv)
	pd, err := d.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, pd)
	access := ibv.AccessLocalWrite | ibv.AccessRemoteWrite | ibv.AccessRemoteRead
	mrA, err := pd.RegMR(bufA, access)
	if err != nil {
		t.Fatal(err)
	}
	mrB, err := pd.RegMR(bufB, access)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, mrA, mrB)
	cqA, err := d.ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	cqB, err := d.ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, cqA, cqB)
	var srq *ibv.SRQ
	if useSRQ {
		if srq, err = pd.CreateSRQ(16, 1); err != nil {
			t.Fatal(err)
		}
		defer closeAll(t, srq)
	}

	lis, err := srv.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(t, lis)
	if err := lis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatal(err)
	}
	if ok, err := lis.OnDevice(d.ctx); err != nil || !ok {
		testutil.SkipOrFail(t, fmt.Sprintf("rdma_cm maps %s to another device than %s (%v)", addr, d.info.Name, err))
	}
	if err := lis.Listen(8); err != nil {
		t.Fatal(err)
	}
	port := lis.Port()
	if port == 0 {
		t.Fatal("the listener has no port")
	}
	idA, err := cli.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	if err := idA.ResolveAddrPort(netip.AddrPortFrom(addr, port), waitTimeout); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, cli, EventAddrResolved)
	if err := idA.ResolveRoute(waitTimeout); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, cli, EventRouteResolved)
	qpA, err := pd.CreateQP(ibv.QPInitAttr{SendCQ: cqA, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := idA.InitQP(qpA); err != nil {
		t.Fatal(err)
	}
	rd := min(16, d.info.MaxQPRdAtom, d.info.MaxQPInitRdAtom)
	if err := idA.Connect(qpA, []byte("xfer-hello"), rd); err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, srv, EventConnectRequest)
	idB := ev.ID
	if idB == nil || idB == lis {
		t.Fatalf("CONNECT_REQUEST: ID %v", ev.ID)
	}
	if !bytes.HasPrefix(ev.PrivateData, []byte("xfer-hello")) {
		t.Errorf("CONNECT_REQUEST private data %q, want the prefix %q", ev.PrivateData, "xfer-hello")
	}
	qpB, err := pd.CreateQP(ibv.QPInitAttr{SendCQ: cqB, SRQ: srq, MaxSendWR: 16, MaxRecvWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the IDs, before the CQs, SRQ and PD (deferred above).
	defer closeAll(t, qpA, qpB)
	defer closeAll(t, idA, idB)
	if err := idB.InitQP(qpB); err != nil {
		t.Fatal(err)
	}
	// A receive posted before the connection is accepted.
	recv := ibv.RecvWR{ID: 0xb1, SGE: mrB.SGE(0, 64)}
	if srq != nil {
		err = srq.PostRecv([]ibv.RecvWR{recv})
	} else {
		_, err = qpB.PostRecv([]ibv.RecvWR{recv})
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := idB.Accept(qpB, []byte("xfer-welcome"), rd); err != nil {
		t.Fatal(err)
	}
	if d.info.IWARP() {
		ev = expectEvent(t, cli, EventEstablished)
	} else {
		ev = expectEvent(t, cli, EventConnectResponse)
		if err := idA.Established(qpA); err != nil {
			t.Fatal(err)
		}
	}
	if ev.ID != idA || !bytes.HasPrefix(ev.PrivateData, []byte("xfer-welcome")) {
		t.Errorf("%v for %v with %q, want the connector %v and %q", ev.Type, ev.ID, ev.PrivateData, idA, "xfer-welcome")
	}
	if ev = expectEvent(t, srv, EventEstablished); ev.ID != idB {
		t.Errorf("ESTABLISHED for %v, want the accepted ID %v", ev.ID, idB)
	}

	// SEND from A to B.
	for i := range 64 {
		bufA[i] = byte(i*7 + 1)
	}
	if _, err := qpA.PostSend([]ibv.SendWR{{ID: 0xa1, Op: ibv.OpSend, Flags: ibv.FlagSignaled, SGE: mrA.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, cqA, 0xa1)
	if wc := waitWC(t, cqB, 0xb1); wc.ByteLen != 64 || !bytes.Equal(bufB[:64], bufA[:64]) {
		t.Errorf("SEND: %d bytes, %x, want %x", wc.ByteLen, bufB[:64], bufA[:64])
	}
	// RDMA WRITE of 32 KiB from A into B, and READ of it back into A.
	for i := range size / 2 {
		bufA[i] = byte(i>>8) ^ byte(i)
	}
	half := size / 2
	if _, err := qpA.PostSend([]ibv.SendWR{{ID: 0xa2, Op: ibv.OpWrite, Flags: ibv.FlagSignaled,
		SGE: mrA.SGE(0, half), RemoteAddr: uint64(mrB.Addr), RKey: mrB.RKey}}); err != nil {
		t.Fatal(err)
	}
	// The WRITE's completion says only that A may reuse its buffer: on
	// iWARP (siw) it comes once the data is on the wire, before the target
	// has placed it. The READ that follows on the same queue pair is
	// answered after the WRITE is placed, so the target is checked then.
	waitWC(t, cqA, 0xa2)
	if _, err := qpA.PostSend([]ibv.SendWR{{ID: 0xa3, Op: ibv.OpRead, Flags: ibv.FlagSignaled,
		SGE: mrA.SGE(half, half), RemoteAddr: uint64(mrB.Addr), RKey: mrB.RKey}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, cqA, 0xa3)
	if !bytes.Equal(bufB[:half], bufA[:half]) {
		t.Error("RDMA WRITE: the target's bytes differ")
	}
	if !bytes.Equal(bufA[half:], bufB[:half]) {
		t.Error("RDMA READ: the bytes read differ")
	}

	// The active side disconnects; both see DISCONNECTED (TIMEWAIT_EXIT may
	// come first).
	disconnected := func(ch *Channel, who string) {
		for {
			ev, err := ch.GetEvent(waitTimeout)
			if err != nil {
				t.Errorf("%s: waiting for DISCONNECTED: %v", who, err)
				return
			}
			if ev.Type == EventDisconnected {
				return
			}
			if ev.Type != EventTimewaitExit {
				t.Errorf("%s: %v, want DISCONNECTED", who, ev.Type)
				return
			}
		}
	}
	if !d.info.IWARP() {
		if err := qpA.ToError(); err != nil {
			t.Error(err)
		}
	}
	if err := idA.Disconnect(); err != nil {
		t.Error(err)
	}
	disconnected(srv, "passive side")
	if err := idB.Disconnect(); err != nil {
		t.Logf("passive side Disconnect after DISCONNECTED: %v", err)
	}
	disconnected(cli, "active side")
}

// mmap maps size bytes for the duration of tb: registered memory is never
// Go heap memory.
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

// TestReject: a rejected connect reports REJECTED; nothing is left open.
func TestReject(t *testing.T) {
	d := openTestDevice(t)
	addr := testutil.RequireRDMAAddr(t)
	ch, err := NewChannel()
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
	expectEvent(t, ch, EventAddrResolved)
	if err := cli.ResolveRoute(waitTimeout); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, ch, EventRouteResolved)
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
	qp, err := pd.CreateQP(ibv.QPInitAttr{SendCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	if err := cli.InitQP(qp); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(qp, []byte("knock"), 1); err != nil {
		t.Fatal(err)
	}
	ev := expectEvent(t, ch, EventConnectRequest)
	if ev.ID == nil || ev.ID == lis || ev.ID == cli {
		t.Fatalf("CONNECT_REQUEST %+v", ev)
	}
	if err := ev.ID.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.Close(); err != nil {
		t.Fatal(err)
	}
	rej := expectEvent(t, ch, EventRejected)
	if rej.ID != cli || rej.Status == 0 {
		t.Errorf("REJECTED %+v", rej)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Bind(netip.AddrPortFrom(addr, 0)); !errors.Is(err, ErrClosed) {
		t.Errorf("Bind after Close = %v, want ErrClosed", err)
	}
}

// TestChannelWait: timeouts, cancelation and errors of an idle channel,
// and a removal watch that binds, hears nothing and closes.
func TestChannelWait(t *testing.T) {
	d := openTestDevice(t)
	ch, err := NewChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if ch.FD() < 0 {
		t.Errorf("FD() = %d", ch.FD())
	}
	if _, err := ch.GetEvent(30 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("GetEvent on an idle channel = %v, want ErrDeadlineExceeded", err)
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
		t.Error("Close with an open ID succeeded")
	}
	if err := id.Bind(netip.AddrPort{}); err == nil {
		t.Error("Bind to the invalid address succeeded")
	}
	if err := id.Close(); err != nil {
		t.Fatal(err)
	}

	addr := testutil.RequireRDMAAddr(t)
	w, err := WatchRemoval(addr, d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Removed():
		t.Error("a removal reported with the device in place")
	case <-time.After(50 * time.Millisecond):
	}
	if c := Live(); c.Watches != 1 {
		t.Errorf("Live().Watches = %d with one watch", c.Watches)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := WatchRemoval(netip.MustParseAddr("192.0.2.1"), nil); err == nil {
		t.Error("a watch of an address no RDMA device has")
	}
}

//go:build cgo

package ibv

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

	"github.com/xferio/xfer/internal/testutil"
)

// TestKCMABI checks the offsets and sizes of the kernel's rdma_cm ABI that
// KCMChannel writes by hand against <rdma/rdma_user_cm.h>. It needs a C
// compiler and the header (libibverbs-dev); without them it skips, or fails
// with XFER_REQUIRE_VERBS=1.
func TestKCMABI(t *testing.T) {
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

// expectK waits for the next event on ch and checks its type.
func expectK(tb testing.TB, ch *KCMChannel, want CMEventType) KCMEvent {
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

// newKCMPair connects two QPs of the test device's own context through the
// kernel's rdma_cm (no librdmacm): a listener and a connector in one
// process, each with its own channel, driven in one goroutine.
func newKCMPair(tb testing.TB, opts pairOpts) *pair {
	tb.Helper()
	d := openTestDevice(tb)
	addr := testAddr(tb)
	p := &pair{tb: tb, info: d.info, bufA: mmap(tb, bufSize), bufB: mmap(tb, bufSize)}
	tb.Cleanup(p.close)
	var err error
	if p.kcmSrv, err = NewKCMChannel(); err != nil {
		tb.Fatal(err)
	}
	if p.kcmCli, err = NewKCMChannel(); err != nil {
		tb.Fatal(err)
	}
	p.setup(d.ctx, opts)
	if p.klis, err = p.kcmSrv.CreateID(); err != nil {
		tb.Fatal(err)
	}
	if err := p.klis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		tb.Fatal(err)
	}
	if ok, err := p.klis.OnDevice(d.ctx); err != nil || !ok {
		testutil.SkipOrFail(tb, fmt.Sprintf("rdma_cm maps %s to another device than %s (%v)", addr, d.info.Name, err))
	}
	if err := p.klis.Listen(8); err != nil {
		tb.Fatal(err)
	}
	port := p.klis.Port()
	if port == 0 {
		tb.Fatal("the listener has no port")
	}
	if p.kcli, err = p.kcmCli.CreateID(); err != nil {
		tb.Fatal(err)
	}
	if err := p.kcli.ResolveAddrPort(netip.AddrPortFrom(addr, port), waitTimeout); err != nil {
		tb.Fatal(err)
	}
	expectK(tb, p.kcmCli, CMEventAddrResolved)
	if err := p.kcli.ResolveRoute(waitTimeout); err != nil {
		tb.Fatal(err)
	}
	expectK(tb, p.kcmCli, CMEventRouteResolved)
	if p.a, err = p.pd.CreateQP(p.attrA()); err != nil {
		tb.Fatal(err)
	}
	if err := p.kcli.InitQP(p.a); err != nil {
		tb.Fatal(err)
	}
	rd := min(16, p.info.MaxQPRdAtom, p.info.MaxQPInitRdAtom)
	if err := p.kcli.Connect(p.a, []byte("xfer-hello"), rd); err != nil {
		tb.Fatal(err)
	}
	ev := expectK(tb, p.kcmSrv, CMEventConnectRequest)
	p.ksrv = ev.ID
	if p.ksrv == nil || p.ksrv == p.klis {
		tb.Fatalf("CONNECT_REQUEST: ID %v", ev.ID)
	}
	if !bytes.HasPrefix(ev.PrivateData, []byte("xfer-hello")) {
		tb.Errorf("CONNECT_REQUEST private data %q, want the prefix %q", ev.PrivateData, "xfer-hello")
	}
	if p.b, err = p.pd.CreateQP(p.attrB()); err != nil {
		tb.Fatal(err)
	}
	if err := p.ksrv.InitQP(p.b); err != nil {
		tb.Fatal(err)
	}
	if err := p.ksrv.Accept(p.b, []byte("xfer-welcome"), rd); err != nil {
		tb.Fatal(err)
	}
	if p.iwarp() {
		ev = expectK(tb, p.kcmCli, CMEventEstablished)
	} else {
		ev = expectK(tb, p.kcmCli, CMEventConnectResponse)
		if err := p.kcli.Established(p.a); err != nil {
			tb.Fatal(err)
		}
	}
	if ev.ID != p.kcli {
		tb.Errorf("%v for %v, want the connector %v", ev.Type, ev.ID, p.kcli)
	}
	if !bytes.HasPrefix(ev.PrivateData, []byte("xfer-welcome")) {
		tb.Errorf("%v private data %q, want the prefix %q", ev.Type, ev.PrivateData, "xfer-welcome")
	}
	ev = expectK(tb, p.kcmSrv, CMEventEstablished)
	if ev.ID != p.ksrv {
		tb.Errorf("ESTABLISHED for %v, want the accepted ID %v", ev.ID, p.ksrv)
	}
	p.established = true
	for _, q := range []*QP{p.a, p.b} {
		s, err := q.State()
		if err == nil && s == QPSReset && p.iwarp() {
			p.noQPState = true
			continue
		}
		if err != nil || s != QPSRTS {
			tb.Fatalf("QP %#x after ESTABLISHED: state %v, %v; want RTS", q.Num(), s, err)
		}
	}
	return p
}

// closeKCM tears a newKCMPair down.
func (p *pair) closeKCM(check func(error)) {
	tb := p.tb
	if p.established {
		disconnected := func(ch *KCMChannel, who string) {
			for {
				ev, err := ch.GetEvent(waitTimeout)
				if err != nil {
					tb.Errorf("%s: waiting for DISCONNECTED: %v", who, err)
					return
				}
				if ev.Type == CMEventDisconnected {
					return
				}
				if ev.Type != CMEventTimewaitExit {
					tb.Errorf("%s: %v, want DISCONNECTED", who, ev.Type)
					return
				}
			}
		}
		if !p.iwarp() {
			check(p.a.ToError())
		}
		check(p.kcli.Disconnect())
		disconnected(p.kcmSrv, "passive side")
		if err := p.ksrv.Disconnect(); err != nil {
			tb.Logf("passive side Disconnect after DISCONNECTED: %v", err)
		}
		disconnected(p.kcmCli, "active side")
	}
	check(p.a.Close())
	check(p.b.Close())
	check(p.kcli.Close())
	check(p.ksrv.Close())
	check(p.klis.Close())
	check(p.srq.Close())
	check(p.cqA.Close())
	check(p.cqB.Close())
	check(p.ch.Close())
	check(p.mrA.Close())
	check(p.mrB.Close())
	check(p.pd.Close())
	check(p.kcmCli.Close())
	check(p.kcmSrv.Close())
}

// TestKCM connects two QPs through the kernel's rdma_cm without librdmacm
// and runs the data-path tests.
func TestKCM(t *testing.T) {
	p := newKCMPair(t, pairOpts{})
	testDataPath(t, p)
}

// TestKCMSRQ: the passive side receives through a shared receive queue.
func TestKCMSRQ(t *testing.T) {
	p := newKCMPair(t, pairOpts{srq: true})
	p.postRecvB(t, RecvWR{ID: 0xb1, SGE: p.mrB.SGE(0, 64)})
	fill(p.bufA[:64], 9)
	postSend(t, p.a, SendWR{ID: 0xa1, Op: OpSend, Flags: FlagSignaled, SGE: p.mrA.SGE(0, 64)})
	waitWC(t, p.cqA, 0xa1, true)
	if wc := waitWC(t, p.cqB, 0xb1, true); wc.ByteLen != 64 || !bytes.Equal(p.bufB[:64], p.bufA[:64]) {
		t.Errorf("SEND through the SRQ: %+v", wc)
	}
}

// TestKCMReject: a rejected connect reports REJECTED; nothing is left open.
func TestKCMReject(t *testing.T) {
	d := openTestDevice(t)
	addr := testAddr(t)
	ch, err := NewKCMChannel()
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
	expectK(t, ch, CMEventAddrResolved)
	if err := cli.ResolveRoute(waitTimeout); err != nil {
		t.Fatal(err)
	}
	expectK(t, ch, CMEventRouteResolved)
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
	if err := cli.InitQP(qp); err != nil {
		t.Fatal(err)
	}
	if err := cli.Connect(qp, []byte("knock"), 1); err != nil {
		t.Fatal(err)
	}
	ev := expectK(t, ch, CMEventConnectRequest)
	if ev.ID == nil || ev.ID == lis || ev.ID == cli {
		t.Fatalf("CONNECT_REQUEST %+v", ev)
	}
	if err := ev.ID.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.Close(); err != nil {
		t.Fatal(err)
	}
	rej := expectK(t, ch, CMEventRejected)
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

// TestKCMChannelWait: timeouts, cancelation and errors of an idle channel,
// and a removal watch that binds, hears nothing and closes.
func TestKCMChannelWait(t *testing.T) {
	d := openTestDevice(t)
	ch, err := NewKCMChannel()
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

	addr := testAddr(t)
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

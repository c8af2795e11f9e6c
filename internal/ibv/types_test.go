package ibv

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestGIDString(t *testing.T) {
	g := newGIDInfo(1, [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 1}, "RoCE v2")
	if got, want := g.String(), "0000:0000:0000:0000:0000:ffff:0a00:0001"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !g.IPv4Mapped || g.LinkLocal {
		t.Errorf("::ffff:10.0.0.1: IPv4Mapped=%v LinkLocal=%v", g.IPv4Mapped, g.LinkLocal)
	}
	ll := newGIDInfo(0, [16]byte{0: 0xfe, 1: 0x80, 11: 0xff, 12: 0xfe, 15: 1}, "RoCE v2")
	if got, want := ll.String(), "fe80:0000:0000:0000:0000:00ff:fe00:0001"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if ll.IPv4Mapped || !ll.LinkLocal {
		t.Errorf("fe80::: IPv4Mapped=%v LinkLocal=%v", ll.IPv4Mapped, ll.LinkLocal)
	}
	if z := newGIDInfo(0, [16]byte{}, "RoCE v2"); z.IPv4Mapped {
		t.Error("the zero GID is not IPv4-mapped")
	}
	// siw's GID is its netdev's MAC: fe:96:... is a MAC, not fe80::/10.
	if w := newGIDInfo(0, [16]byte{0: 0xfe, 1: 0x96, 2: 0x1c, 3: 0x2b, 4: 0x3a, 5: 0x49}, "iWARP"); w.LinkLocal || w.IPv4Mapped {
		t.Errorf("iWARP GID %s: IPv4Mapped=%v LinkLocal=%v, want neither", w, w.IPv4Mapped, w.LinkLocal)
	}
}

func TestMTU(t *testing.T) {
	for e, b := range map[int]int{1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096} {
		if got := mtuBytes(e); got != b {
			t.Errorf("mtuBytes(%d) = %d, want %d", e, got, b)
		}
		if got, err := mtuEnum(b); err != nil || got != e {
			t.Errorf("mtuEnum(%d) = %d, %v; want %d", b, got, err, e)
		}
	}
	if _, err := mtuEnum(1500); err == nil {
		t.Error("mtuEnum(1500) succeeded")
	}
	if mtuBytes(0) != 0 || mtuBytes(6) != 0 {
		t.Error("mtuBytes of an unknown enum is not 0")
	}
}

func TestRateString(t *testing.T) {
	for _, c := range []struct {
		width, speed int
		want         string
	}{
		{2, 1, "10 Gb/sec (4X SDR)"},
		{1, 1, "2.5 Gb/sec (1X SDR)"},
		{2, 32, "100 Gb/sec (4X EDR)"},
		{2, 64, "200 Gb/sec (4X HDR)"},
		{0, 1, ""},
	} {
		if got := rateString(c.width, c.speed); got != c.want {
			t.Errorf("rateString(%d, %d) = %q, want %q", c.width, c.speed, got, c.want)
		}
	}
}

func TestGIDType(t *testing.T) {
	for _, c := range []struct{ sysfs, ll, transport, want string }{
		{"IB/RoCE v1", "InfiniBand", "InfiniBand", "IB"},
		{"IB/RoCE v1\n", "Ethernet", "InfiniBand", "RoCE v1"},
		{"RoCE v2", "Ethernet", "InfiniBand", "RoCE v2"},
		{"", "InfiniBand", "InfiniBand", "IB"},
		{"", "Ethernet", "InfiniBand", ""},
		{"IB/RoCE v1", "Ethernet", "iWARP", "iWARP"},
	} {
		if got := gidType(c.sysfs, c.ll, c.transport); got != c.want {
			t.Errorf("gidType(%q, %q, %q) = %q, want %q", c.sysfs, c.ll, c.transport, got, c.want)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{WCSuccess.String(), "success"},
		{WCRemAccessErr.String(), "remote access error"},
		{WCRetryExcErr.String(), "retry exceeded"},
		{WCWRFlushErr.String(), "work request flushed"},
		{WCStatus(99).String(), "unknown completion status 99"},
		{WCRecvRDMAWithImm.String(), "RECV_RDMA_WITH_IMM"},
		{QPSRTS.String(), "RTS"},
		{QPSErr.String(), "ERR"},
		{OpWriteImm.String(), "RDMA_WRITE_WITH_IMM"},
		{portStateString(4), "ACTIVE"},
		{physStateString(5), "LinkUp"},
		{nodeTypeString(4), "RNIC"},
		{transportString(1), "iWARP"},
		{formatGUID([8]byte{0x00, 0x02, 0xc9, 0x03, 0x00, 0x86, 0xa1, 0x00}), "0002:c903:0086:a100"},
		{QPInitAttr{MaxSendWR: 8}.String(), "RC send_wr 8 recv_wr 0 sge 0/0 inline 0"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	for i := range numWCStatus {
		if WCStatus(i).String() == "" {
			t.Errorf("WCStatus(%d) has no name", i)
		}
	}
}

func TestWCError(t *testing.T) {
	wc := WC{ID: 7, Status: WCRemAccessErr, QPNum: 0x11}
	err := fmt.Errorf("write: %w", wc.Err())
	if !errors.Is(err, ErrRemoteAccess) || errors.Is(err, ErrFlushed) || errors.Is(err, ErrRetryExceeded) {
		t.Errorf("%v: wrong sentinel match", err)
	}
	var v WCError
	if !errors.As(err, &v) || v.Status != WCRemAccessErr || v.ID != 7 {
		t.Errorf("errors.As(WCError) = %+v", v)
	}
	var p *WCError
	if !errors.As(err, &p) || p.Status != WCRemAccessErr {
		t.Errorf("errors.As(*WCError) = %+v", p)
	}
	if !strings.Contains(err.Error(), "remote access error") {
		t.Errorf("message %q does not name the status", err)
	}
	if (&WC{Status: WCSuccess}).Err() != nil {
		t.Error("a successful WC has an error")
	}
	if !errors.Is((&WC{Status: WCWRFlushErr}).Err(), ErrFlushed) {
		t.Error("flushed does not match ErrFlushed")
	}
	if !errors.Is((&WC{Status: WCRNRRetryExcErr}).Err(), ErrRetryExceeded) {
		t.Error("RNR retry exceeded does not match ErrRetryExceeded")
	}
}

func TestSentinels(t *testing.T) {
	if !errors.Is(ErrNoDevice, ErrNotSupported) {
		t.Error("ErrNoDevice does not match ErrNotSupported")
	}
	if !errors.Is(ErrClosed, net.ErrClosed) {
		t.Error("ErrClosed does not match net.ErrClosed")
	}
	le := &LibraryError{Library: "libibverbs.so.1", Detail: "dlopen: not found", Fix: fixVerbs}
	if !errors.Is(le, ErrNotSupported) || !strings.Contains(le.Error(), "apt-get install rdma-core") {
		t.Errorf("LibraryError %q", le)
	}
	pe := &PostError{Op: "ibv_post_send", Object: "QP 0x11 on rxe0", N: 4, Posted: 2, Bad: 2, BadID: 9, Err: syscall.ENOMEM}
	if !errors.Is(pe, syscall.ENOMEM) || !strings.Contains(pe.Error(), "WR 2 (id 0x9) of 4 refused, 2 posted") {
		t.Errorf("PostError %q", pe)
	}
}

func TestLiveZero(t *testing.T) {
	if c := (Counts{}); !c.IsZero() || !strings.Contains(c.String(), "qps=0") {
		t.Errorf("Counts{} = %v", c)
	}
}

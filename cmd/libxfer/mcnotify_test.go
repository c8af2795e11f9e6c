package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer"
)

// waitNotifies takes m's notifications until want have arrived or a
// second has passed.
func waitNotifies(t *testing.T, m *mcEngine, want int) []mcNotify {
	t.Helper()
	var got []mcNotify
	for end := time.Now().Add(time.Second); len(got) < want && time.Now().Before(end); {
		ns, dropped := m.inbox.take()
		if dropped != 0 {
			t.Fatalf("%d notifications dropped", dropped)
		}
		got = append(got, ns...)
		if len(got) < want {
			time.Sleep(time.Millisecond)
		}
	}
	return got
}

func TestMCNotify(t *testing.T) {
	target, seg := openMC(t)
	init, _ := openMC(t)
	remote, local := mmapped(t, 1<<16), mmapped(t, 1<<16)
	if err := target.register([]unsafe.Pointer{ptr(remote)}, []int64{int64(len(remote))}, false); err != nil {
		t.Fatal(err)
	}
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{int64(len(local))}, false); err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(ptr(remote)))
	copy(local, bytes.Repeat([]byte("kv"), 1<<14))
	codes := make([]int32, 2)
	// The notify arrives after the data: when the target sees it, both
	// writes are in place.
	for i, nt := range []mcNotify{{"prefill-0", "req-1 done"}, {"", ""}, {"ünïcode", strings.Repeat("m", 60000)}} {
		clear(remote)
		xs := []mcXfer{{ptr(local), base, 4096}, {ptr(local[8192:]), base + 32768, 8192}}
		if err := init.transferSync(seg, xfer.OpWrite, xs, codes, &nt); err != nil {
			t.Fatalf("notify %d: %v", i, err)
		}
		got := waitNotifies(t, target, 1)
		if len(got) != 1 || got[0] != nt {
			t.Fatalf("notify %d: the target has %d notifications (%.40q), want %.40q", i, len(got), got, nt)
		}
		if !bytes.Equal(remote[:4096], local[:4096]) || !bytes.Equal(remote[32768:32768+8192], local[8192:8192+8192]) {
			t.Fatalf("notify %d: the data was not in place", i)
		}
	}
	// A READ notifies too; taking empties the queue.
	nt := mcNotify{"decode-1", "read"}
	if err := init.transferSync(seg, xfer.OpRead, []mcXfer{{ptr(local), base, 64}}, codes, &nt); err != nil {
		t.Fatal(err)
	}
	if got := waitNotifies(t, target, 1); len(got) != 1 || got[0] != nt {
		t.Fatalf("after a READ: %q", got)
	}
	if ns, _ := target.inbox.take(); len(ns) != 0 {
		t.Fatalf("taken twice: %q", ns)
	}
	// Too large for one message: refused before anything moves.
	remote[0] = 0
	big := mcNotify{"n", strings.Repeat("x", 1<<20)}
	err := init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), base, 16}}, codes, &big)
	if mcCodeOf(err) != mcErrInvalid || remote[0] != 0 {
		t.Errorf("a notify of 1 MiB: %v (code %d), first byte %d", err, mcCodeOf(err), remote[0])
	}
	// A transfer that fails sends no notify.
	err = init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), base + uint64(len(remote)), 16}}, codes, &nt)
	if mcCodeOf(err) != mcErrNotRegistered {
		t.Errorf("past the range: %v (code %d)", err, mcCodeOf(err))
	}
	if ns, _ := target.inbox.take(); len(ns) != 0 {
		t.Errorf("a failed transfer notified: %q", ns)
	}
}

func TestMCNotifyDeadPeer(t *testing.T) {
	init, _ := openMC(t)
	local := mmapped(t, 4096)
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{4096}, false); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	start := time.Now()
	nt := mcNotify{"a", "b"}
	err = init.transferSync(dead, xfer.OpWrite, []mcXfer{{ptr(local), 4096, 16}}, make([]int32, 1), &nt)
	if mcCodeOf(err) != mcErrSocket {
		t.Errorf("notify to nothing: %v (code %d)", err, mcCodeOf(err))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestMCProbe(t *testing.T) {
	target, seg := openMC(t)
	init, _ := openMC(t)
	if err := init.probe(seg); err != nil {
		t.Fatalf("probe a live segment: %v", err)
	}
	if err := init.probe(seg); err != nil {
		t.Fatalf("probe it again: %v", err)
	}
	_ = target
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	if err := init.probe(dead); mcCodeOf(err) != mcErrSocket {
		t.Errorf("probe nothing: %v (code %d)", err, mcCodeOf(err))
	}
	if err := init.probe("no-port"); mcCodeOf(err) != mcErrInvalid {
		t.Errorf("probe a name that is not host:port: %v (code %d)", err, mcCodeOf(err))
	}
	// A plain xfer engine answers, but is no Mooncake segment.
	e, err := xfer.Open(t.Context(), xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := init.probe(e.Addr()); mcCodeOf(err) != mcErrMetadata {
		t.Errorf("probe a plain engine: %v (code %d)", err, mcCodeOf(err))
	}
}

func TestMCRegisterDevice(t *testing.T) {
	m, _ := openMC(t)
	host := mmapped(t, 4096)
	// Host memory registered as GPU memory: refused (no driver: -6; a
	// driver that does not know the pointer: -1), and nothing is listed.
	err := m.register([]unsafe.Pointer{ptr(host)}, []int64{4096}, true)
	if c := mcCodeOf(err); c != mcErrNoDevice && c != mcErrInvalid {
		t.Fatalf("host memory as GPU memory: %v (code %d)", err, c)
	}
	if errors.Is(err, xfer.ErrCUDANotAvailable) != (mcCodeOf(err) == mcErrNoDevice) {
		t.Errorf("code %d for %v", mcCodeOf(err), err)
	}
	if len(m.regs) != 0 {
		t.Errorf("%d ranges registered", len(m.regs))
	}
}

func TestNotifyMessage(t *testing.T) {
	for _, n := range []mcNotify{{}, {"name", ""}, {"", "msg"}, {"a\x00b", "c\xffd"}} {
		b := appendNotify(nil, n)
		if len(b) != n.notifyLen() {
			t.Errorf("%q: %d bytes, notifyLen %d", n, len(b), n.notifyLen())
		}
		if got, ok := decodeNotify(b); !ok || got != n {
			t.Errorf("%q: decoded %q, %v", n, got, ok)
		}
	}
	for _, b := range [][]byte{nil, []byte("XMC"), appendNotify(nil, mcNotify{"x", "y"})[1:], {0x58, 0x4d, 0x43, 0x4e, 9, 0, 0, 0, 'a'}} {
		if n, ok := decodeNotify(b); ok {
			t.Errorf("%q decoded as %q", b, n)
		}
	}
}

func FuzzNotifyMessage(f *testing.F) {
	f.Add(appendNotify(nil, mcNotify{"prefill", "done"}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := decodeNotify(b)
		if !ok {
			return
		}
		if again := appendNotify(nil, n); !bytes.Equal(again, b) {
			t.Fatalf("%q re-encoded as %q", b, again)
		}
	})
}

package main

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"unsafe"

	"github.com/xferio/xfer"
)

// mmapped maps n bytes the test owns, as a caller's malloc'd memory.
func mmapped(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// openMC opens an engine on loopback without a metadata server
// (P2PHANDSHAKE) and returns it with its segment name.
func openMC(t testing.TB) (*mcEngine, string) {
	t.Helper()
	m := openNamed(t, "127.0.0.1", "P2PHANDSHAKE")
	return m, "127.0.0.1:" + strconv.Itoa(m.port)
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func TestMCEngineLoopback(t *testing.T) {
	target, seg := openMC(t)
	init, _ := openMC(t)
	if target.segment != seg {
		t.Fatalf("segment %q, want %q", target.segment, seg)
	}
	remote := mmapped(t, 1<<16)
	local := mmapped(t, 1<<16)
	if err := target.register([]unsafe.Pointer{ptr(remote)}, []int64{int64(len(remote))}, false); err != nil {
		t.Fatal(err)
	}
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{int64(len(local))}, false); err != nil {
		t.Fatal(err)
	}
	// An overlapping range is refused, and nothing changes.
	if err := target.register([]unsafe.Pointer{ptr(remote[100:])}, []int64{10}, false); mcCodeOf(err) != mcErrOverlapped {
		t.Errorf("overlapping register: %v (code %d)", err, mcCodeOf(err))
	}
	first, err := init.firstBuffer(seg)
	if err != nil || first != uint64(uintptr(ptr(remote))) {
		t.Fatalf("first buffer %#x, %v; want %#p", first, err, ptr(remote))
	}
	copy(local, bytes.Repeat([]byte("xfer"), 1024))
	raddr := first + 512
	codes := make([]int32, 1)
	if err := init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), raddr, 4096}}, codes, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote[512:512+4096], local[:4096]) {
		t.Error("WRITE: the target's memory differs")
	}
	id, err := init.submit(seg, xfer.OpRead, []mcXfer{{ptr(local[8192:]), raddr, 4096}})
	if err != nil {
		t.Fatal(err)
	}
	if err := init.wait(id, codes); err != nil || codes[0] != 0 {
		t.Fatal(err, codes)
	}
	if !bytes.Equal(local[8192:8192+4096], local[:4096]) {
		t.Error("READ: the data differs")
	}
	// A remote range past the registered one: refused before anything moves.
	err = init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), first + uint64(len(remote)) - 10, 20}}, codes, nil)
	if mcCodeOf(err) != mcErrNotRegistered {
		t.Errorf("a range past the buffer: %v (code %d)", err, mcCodeOf(err))
	}
	// An unregistered local range.
	other := mmapped(t, 4096)
	if err := init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(other), first, 20}}, codes, nil); mcCodeOf(err) != mcErrNotRegistered {
		t.Errorf("an unregistered local range: %v (code %d)", err, mcCodeOf(err))
	}
	// A range registered after the peer read the table is found.
	more := mmapped(t, 4096)
	if err := target.register([]unsafe.Pointer{ptr(more)}, []int64{4096}, false); err != nil {
		t.Fatal(err)
	}
	if err := init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), uint64(uintptr(ptr(more))), 4096}}, codes, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(more, local[:4096]) {
		t.Error("WRITE to a range registered later: differs")
	}
	// Unregistered, it is refused.
	if err := target.unregister([]unsafe.Pointer{ptr(more)}); err != nil {
		t.Fatal(err)
	}
	err = init.transferSync(seg, xfer.OpWrite, []mcXfer{{ptr(local), uint64(uintptr(ptr(more))), 16}}, codes, nil)
	if mcCodeOf(err) != mcErrNotRegistered {
		t.Errorf("a range unregistered since: %v (code %d)", err, mcCodeOf(err))
	}
	// Nothing listens on an unknown segment.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	if err := init.transferSync(dead, xfer.OpWrite, []mcXfer{{ptr(local), first, 16}}, codes, nil); mcCodeOf(err) != mcErrSocket {
		t.Errorf("an unknown segment: %v (code %d)", err, mcCodeOf(err))
	}
}

func TestMCOpenRefuses(t *testing.T) {
	for _, c := range []struct {
		host, meta, proto string
		want              mcCode
	}{
		{"127.0.0.1", "redis://127.0.0.1:6379", "tcp", mcErrNotImplemented},
		{"127.0.0.1", "ftp://127.0.0.1:1", "tcp", mcErrInvalid},
		{"127.0.0.1", "", "tcp", mcErrInvalid},
		{"127.0.0.1", "P2PHANDSHAKE", "nvlink", mcErrInvalid},
		{"", "P2PHANDSHAKE", "tcp", mcErrInvalid},
	} {
		if h, err := mcOpen(c.host, c.meta, c.proto, ""); mcCodeOf(err) != c.want {
			mcClose(h)
			t.Errorf("open(%q, %q, %q): %v (code %d), want code %d", c.host, c.meta, c.proto, err, mcCodeOf(err), c.want)
		}
	}
}

func TestSegmentTable(t *testing.T) {
	descs := []xfer.RegionDesc{{ID: 3, Addr: 0x1000, Len: 4096, Key: 9, Access: xfer.AccessReadWrite},
		{ID: 4, Addr: 0x9000, Len: 1, Key: 1, Access: xfer.AccessRead}}
	b := make([]byte, segHeaderLen+len(descs)*xfer.RegionDescLen)
	encodeSegment(b, descs, 7)
	got, err := decodeSegment(b)
	if err != nil || len(got) != 2 || got[0] != descs[0] || got[1] != descs[1] {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if d, ok := findRange(got, 0x1ff0, 0x10); !ok || d.ID != 3 {
		t.Errorf("findRange inside: %v %v", d, ok)
	}
	if _, ok := findRange(got, 0x1ff0, 0x11); ok {
		t.Error("findRange past the end: found")
	}
	b[segHeaderLen+5] ^= 1
	if _, err := decodeSegment(b); !errors.Is(err, errTorn) {
		t.Errorf("a changed entry: %v, want errTorn", err)
	}
}

func FuzzSegmentTable(f *testing.F) {
	b := make([]byte, segHeaderLen+xfer.RegionDescLen)
	encodeSegment(b, []xfer.RegionDesc{{ID: 1, Addr: 4096, Len: 64, Key: 2, Access: xfer.AccessReadWrite}}, 1)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		descs, err := decodeSegment(b)
		if err != nil {
			return
		}
		out := make([]byte, segHeaderLen+len(descs)*xfer.RegionDescLen)
		encodeSegment(out, descs, 0)
		again, err := decodeSegment(out)
		if err != nil || len(again) != len(descs) {
			t.Fatalf("re-encoded table: %v, %d entries of %d", err, len(again), len(descs))
		}
		for _, d := range descs {
			if _, ok := findRange(descs, d.Addr, d.Len); !ok {
				t.Fatalf("entry %+v not found by its own range", d)
			}
		}
	})
}

// BenchmarkMCTransferSync1M is a 1 MiB WRITE through the Mooncake
// engine's sync path (what batch_transfer_sync_write runs below Python),
// one at a time between two engines of this process: from a goroutine,
// and from a goroutine locked to its thread, as a call through the C ABI
// is; Peer.Write of the same bytes is the floor.
func BenchmarkMCTransferSync1M(b *testing.B) { benchTransferSync(b, 1<<20) }

// BenchmarkMCTransferSync16 is BenchmarkMCTransferSync1M's call with 16
// bytes: what a call costs besides its bytes.
func BenchmarkMCTransferSync16(b *testing.B) { benchTransferSync(b, 16) }

func benchTransferSync(b *testing.B, n int) {
	target, seg := openMC(b)
	init, _ := openMC(b)
	remote, local := mmappedB(b, max(n, 4096)), mmappedB(b, max(n, 4096))
	for i := range local {
		local[i], remote[i] = byte(i), byte(i>>3)
	}
	if err := target.register([]unsafe.Pointer{ptr(remote)}, []int64{int64(len(remote))}, false); err != nil {
		b.Fatal(err)
	}
	if err := init.register([]unsafe.Pointer{ptr(local)}, []int64{int64(len(local))}, false); err != nil {
		b.Fatal(err)
	}
	xs := []mcXfer{{ptr(local), uint64(uintptr(ptr(remote))), int64(n)}}
	codes := make([]int32, 1)
	run := func(b *testing.B) {
		b.SetBytes(int64(n))
		for b.Loop() {
			if err := init.transferSync(seg, xfer.OpWrite, xs, codes, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("goroutine", run)
	b.Run("locked", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		run(b)
	})
	b.Run("peer-write", func(b *testing.B) {
		mp := init.peers[seg]
		ra, err := init.resolve(b.Context(), mp, xs[0].remote, uint64(n))
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(n))
		for b.Loop() {
			if err := mp.p.Write(b.Context(), local[:n], ra); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func mmappedB(b *testing.B, n int) []byte {
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Munmap(m) })
	return m
}

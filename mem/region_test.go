package mem

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/sys"
)

func TestNewRegion(t *testing.T) {
	page := sys.PageSize()
	for _, h := range []HugePages{HugeAuto, HugeOff} {
		t.Run(h.String(), func(t *testing.T) {
			r, err := NewRegion(RegionOptions{Size: 10000, HugePages: h})
			skipIfNotSupported(t, err)
			if err != nil {
				t.Fatal(err)
			}
			want := (10000 + page - 1) / page * page
			if r.Len() != want || len(r.Bytes()) != want {
				t.Fatalf("Len %d, len(Bytes) %d, want %d", r.Len(), len(r.Bytes()), want)
			}
			if !r.Owned() || r.FD() != -1 {
				t.Fatalf("private region: Owned %v, FD %d", r.Owned(), r.FD())
			}
			if r.Addr()%uintptr(page) != 0 || r.Addr() != addr(r.Bytes()) {
				t.Fatalf("Addr %#x, Bytes at %#x", r.Addr(), addr(r.Bytes()))
			}
			b := r.Bytes()
			if bytes.ContainsFunc(b, func(c rune) bool { return c != 0 }) {
				t.Fatal("new region is not zeroed")
			}
			for i := range b {
				b[i] = byte(i)
			}

			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal("second Close:", err)
			}
			if r.Bytes() != nil || r.Len() != 0 || r.Addr() != 0 || r.FD() != -1 {
				t.Fatal("closed region still exposes memory")
			}
			if _, ok := r.Contains(b); ok {
				t.Fatal("closed region contains its old memory")
			}
		})
	}
	t.Logf("THP %q, shmem THP %q", sys.THPMode(), sys.ShmemTHPMode())
}

func TestNewRegionBadOptions(t *testing.T) {
	for _, opts := range []RegionOptions{
		{Size: 0},
		{Size: -1},
		{Size: int(^uint(0) >> 1)}, // rounding up to a page overflows
		{Size: 4096, HugePages: HugePages(7)},
	} {
		if r, err := NewRegion(opts); err == nil {
			r.Close()
			t.Errorf("NewRegion(%+v) succeeded", opts)
		}
	}
}

func TestSharedRegion(t *testing.T) {
	r := newTestRegion(t, RegionOptions{Size: 3 * sys.PageSize(), Shared: true, Name: "xfer-test"})
	if r.FD() < 0 {
		t.Fatalf("shared region FD %d", r.FD())
	}
	// A second mapping of the memfd, as a peer would make, sees the same
	// bytes both ways.
	peer, err := sys.MmapShared(r.FD(), r.Len())
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Munmap(peer)
	copy(r.Bytes(), "written through the region")
	copy(peer[100:], "written by the peer")
	if !bytes.Equal(r.Bytes(), peer) {
		t.Fatal("the two mappings differ")
	}
	if !bytes.HasPrefix(r.Bytes()[100:], []byte("written by the peer")) {
		t.Fatal("the region does not see the peer's write")
	}
}

func TestWrapRegion(t *testing.T) {
	m, err := sys.MmapAnon(8192, false)
	skipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Munmap(m)

	r, err := WrapRegion(m[100:5000])
	if err != nil {
		t.Fatal(err)
	}
	if r.Owned() || r.FD() != -1 || r.Len() != 4900 || r.Addr() != addr(m[100:]) {
		t.Fatalf("wrapped region: Owned %v, FD %d, Len %d", r.Owned(), r.FD(), r.Len())
	}
	if cap(r.Bytes()) != 4900 {
		t.Fatalf("wrapped region reaches past its end: cap %d", cap(r.Bytes()))
	}

	other := newTestRegion(t, RegionOptions{Size: 4096})
	for _, tc := range []struct {
		name string
		b    []byte
		off  int
		ok   bool
	}{
		{"all", m[100:5000], 0, true},
		{"first byte", m[100:101], 0, true},
		{"last byte", m[4999:5000], 4899, true},
		{"middle", m[1000:2000], 900, true},
		{"empty at start", m[100:100], 0, true},
		{"empty in the middle", m[300:300], 200, true},
		{"empty at the end", m[5000:5000], 4900, true},
		{"empty past the end", m[5001:5001], 0, false},
		{"before", m[99:100], 0, false},
		{"straddles start", m[99:101], 0, false},
		{"straddles end", m[4999:5001], 0, false},
		{"after", m[5000:5001], 0, false},
		{"nil", nil, 0, false},
		{"another region", other.Bytes(), 0, false},
	} {
		off, ok := r.Contains(tc.b)
		if ok != tc.ok || ok && off != tc.off {
			t.Errorf("Contains(%s) = %d, %v; want %d, %v", tc.name, off, ok, tc.off, tc.ok)
		}
	}

	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.Bytes() != nil {
		t.Fatal("Bytes after Close is not nil")
	}
	// Close left the caller's memory mapped.
	m[200] = 1

	if _, err := WrapRegion(nil); err == nil {
		t.Error("WrapRegion(nil) succeeded")
	}
	if _, err := WrapRegion(m[10:10]); err == nil {
		t.Error("WrapRegion(empty) succeeded")
	}
}

func TestNilRegionClose(t *testing.T) {
	var r *Region
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHugeExplicit checks that explicit huge pages work when the kernel
// has some reserved, and fail with an error that says how to reserve them
// when it has none.
func TestHugeExplicit(t *testing.T) {
	h, herr := sys.HugeTLBPages()
	for _, shared := range []bool{false, true} {
		opts := RegionOptions{Size: 1, HugePages: HugeExplicit, Shared: shared}
		r, err := NewRegion(opts)
		skipIfNotSupported(t, err)
		if herr == nil && h.Free-h.Reserved >= 1 {
			if err != nil {
				t.Fatalf("%d huge pages available, but NewRegion(%+v): %v", h.Free-h.Reserved, opts, err)
			}
			if r.Len() != h.PageSize {
				t.Errorf("explicit region of %d bytes, want one huge page of %d", r.Len(), h.PageSize)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err == nil {
			r.Close()
			t.Fatalf("NewRegion(%+v) succeeded without huge pages reserved", opts)
		}
		if !errors.Is(err, ErrNoHugePages) || !strings.Contains(err.Error(), "echo N > /proc/sys/vm/nr_hugepages") {
			t.Fatalf("NewRegion(%+v) = %v; want ErrNoHugePages and how to reserve them", opts, err)
		}
		t.Logf("shared=%v: %v", shared, err)
	}
}

func TestHugePagesText(t *testing.T) {
	for _, h := range []HugePages{HugeAuto, HugeOff, HugeExplicit} {
		text, err := h.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got HugePages
		if err := got.UnmarshalText(text); err != nil || got != h {
			t.Errorf("round trip of %v: %v, %v", h, got, err)
		}
		if p, err := ParseHugePages(h.String()); err != nil || p != h {
			t.Errorf("ParseHugePages(%q) = %v, %v", h.String(), p, err)
		}
	}
	for _, s := range []string{"", "on", "Auto", "explicit "} {
		if _, err := ParseHugePages(s); err == nil {
			t.Errorf("ParseHugePages(%q) succeeded", s)
		}
	}
	if s := HugePages(7).String(); s != "HugePages(7)" {
		t.Errorf("String of an invalid value = %q", s)
	}
	if _, err := HugePages(7).MarshalText(); err == nil {
		t.Error("MarshalText of an invalid value succeeded")
	}
}

// TestRegionLargerThanHost: a region larger than the host's memory is
// refused at once, with both sizes, instead of failing at a page fault.
func TestRegionLargerThanHost(t *testing.T) {
	total, err := sys.TotalMemory()
	if err != nil {
		t.Skipf("no memory size here: %v", err)
	}
	_, err = NewRegion(RegionOptions{Size: int(total) + 1<<30})
	if err == nil || !strings.Contains(err.Error(), "more than this host's") {
		t.Fatalf("region of %d bytes on a host of %d: %v", total+1<<30, total, err)
	}
}

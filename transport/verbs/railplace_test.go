package verbs

import (
	"errors"
	"testing"

	"github.com/xferio/xfer/transport"
)

// place cuts a WRITE or READ above a slice into one piece per rail up, at
// slice boundaries, covering it exactly; a smaller one, or one with a
// single rail up, is one piece on the least loaded rail.
func TestRailPlace(t *testing.T) {
	const slice = 1 << 20
	re := newRailEndpoint(&rails{cfg: Config{SliceSize: slice}}, 3)
	for i := range re.eps {
		re.eps[i].Store(&Endpoint{})
	}
	buf := make([]byte, 8*slice+5)
	check := func(n int, wantPieces int, wantRails map[int]bool) {
		t.Helper()
		op := &transport.Op{Kind: transport.OpWrite, Local: buf[:n], Remote: transport.RemoteAddr{Region: 1, Addr: 1 << 40}}
		cs := re.place(op)
		if len(cs) != wantPieces {
			t.Fatalf("%d bytes: %d pieces, want %d", n, len(cs), wantPieces)
		}
		off, seen := 0, map[int]bool{}
		for _, c := range cs {
			if &c.op.Local[0] != &buf[off] || c.op.Remote.Addr != 1<<40+uint64(off) {
				t.Fatalf("%d bytes: a piece at %d does not follow the one before it", n, off)
			}
			if len(cs) > 1 && (len(c.op.Local)%slice != 0 && off+len(c.op.Local) != n) {
				t.Fatalf("%d bytes: a piece of %d bytes ends off a slice boundary", n, len(c.op.Local))
			}
			if seen[c.rail] {
				t.Fatalf("%d bytes: two pieces on rail %d", n, c.rail)
			}
			seen[c.rail] = true
			off += len(c.op.Local)
		}
		if off != n {
			t.Fatalf("%d bytes: the pieces cover %d", n, off)
		}
		for r := range seen {
			if !wantRails[r] {
				t.Fatalf("%d bytes: a piece on rail %d, want only %v", n, r, wantRails)
			}
		}
		for _, c := range cs {
			*c = railOp{}
		}
	}
	all := map[int]bool{0: true, 1: true, 2: true}
	check(4096, 1, all)
	check(slice, 1, all)
	check(slice+1, 2, all)
	check(3*slice, 3, all)
	check(8*slice+5, 3, all)
	// The least loaded rail takes a small one.
	re.load[0].Store(5)
	re.load[2].Store(5)
	check(4096, 1, map[int]bool{1: true})
	// A rail down takes nothing; with one rail left nothing is cut.
	re.down[1].Store(true)
	check(8*slice, 2, map[int]bool{0: true, 2: true})
	re.ep(2).err = errors.New("failed")
	check(8*slice, 1, map[int]bool{0: true})
}

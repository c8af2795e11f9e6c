package verbs

import (
	"errors"
	"testing"

	"github.com/xferio/xfer/mem"
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

// With the rails' devices on different NUMA nodes, an operation below a
// slice goes to the rail on its memory's node (looked up once per region),
// unless that rail has more than localSlack operations in flight beyond
// the least loaded one; memory on a node no rail is on, or rails on one
// node, keep the least loaded choice.
func TestRailPlaceNUMA(t *testing.T) {
	const slice = 1 << 20
	r := &rails{cfg: Config{SliceSize: slice}}
	re := newRailEndpoint(r, 3)
	for i := range re.eps {
		re.eps[i].Store(&Endpoint{})
		re.subs[i] = &Transport{numaNode: i % 2} // rails 0 and 2 on node 0, rail 1 on node 1
	}
	re.numa = railsNUMA(re.subs)
	if !re.numa {
		t.Fatal("rails on nodes 0, 1, 0: railsNUMA says they do not differ")
	}
	if railsNUMA([]*Transport{{numaNode: 1}, {numaNode: -1}, {numaNode: 1}}) {
		t.Fatal("rails on one known node: railsNUMA says they differ")
	}
	nodes := map[*byte]int{}
	lookups := 0
	old := memNode
	memNode = func(b []byte) (int, error) {
		lookups++
		if n, ok := nodes[&b[0]]; ok {
			return n, nil
		}
		return -1, errors.New("unknown")
	}
	defer func() { memNode = old }()
	region := func(node int) *mem.Handle {
		reg, err := mem.NewRegion(mem.RegionOptions{Size: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
		nodes[&reg.Bytes()[0]] = node
		return mem.NewHandle(reg, 1, 1, mem.AccessRead|mem.AccessWrite)
	}
	on0, on1, on5 := region(0), region(1), region(5)
	railOf := func(h *mem.Handle) int {
		t.Helper()
		op := &transport.Op{Kind: transport.OpRead, Local: h.Bytes()[:4096], Region: h}
		cs := re.place(op)
		if len(cs) != 1 {
			t.Fatalf("a 4 KiB read in %d pieces", len(cs))
		}
		rail := cs[0].rail
		*cs[0] = railOp{}
		return rail
	}
	for range 4 {
		if got := railOf(on1); got != 1 {
			t.Fatalf("memory on node 1 went to rail %d, want rail 1 (node 1)", got)
		}
		if got := railOf(on0); got != 0 && got != 2 {
			t.Fatalf("memory on node 0 went to rail %d, want rail 0 or 2 (node 0)", got)
		}
	}
	if lookups != 2 {
		t.Fatalf("%d node lookups for two regions, want one each", lookups)
	}
	// Rail 1 busy beyond the slack: node 1's memory spills to the least
	// loaded rail; within the slack it stays.
	re.load[1].Store(localSlack)
	if got := railOf(on1); got != 1 {
		t.Fatalf("rail 1 with %d more in flight (the slack): node 1's memory went to rail %d", localSlack, got)
	}
	re.load[1].Store(localSlack + 1)
	if got := railOf(on1); got == 1 {
		t.Fatal("rail 1 loaded beyond the slack still took node 1's memory")
	}
	re.load[1].Store(0)
	// A node no rail is on: the least loaded rail.
	re.load[0].Store(3)
	re.load[2].Store(3)
	if got := railOf(on5); got != 1 {
		t.Fatalf("memory on node 5 went to rail %d, want the least loaded (1)", got)
	}
	// A region removed is looked up again when registered anew.
	r.regionRemoved(on1)
	railOf(on1)
	if lookups != 4 {
		t.Fatalf("%d lookups, want 4 (node 5's region, and node 1's again after its removal)", lookups)
	}
}

package regions

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// TestMain fails the package's tests if a goroutine or a file descriptor is
// left behind.
func TestMain(m *testing.M) { testmain.Run(m) }

// mapped returns n bytes of anonymous mmap memory, unmapped at the end.
func mapped(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func wrap(t *testing.T, b []byte) *mem.Region {
	t.Helper()
	mr, err := mem.WrapRegion(b)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

type reg struct{ name string }

func add(t *testing.T, tb *Table[*reg], b []byte, access transport.Access, grant bool, name string) (*reg, *mem.Handle) {
	t.Helper()
	r, h, err := tb.Add(wrap(t, b), access, grant, func(*mem.Handle) *reg { return &reg{name} })
	if err != nil {
		t.Fatal(err)
	}
	return r, h
}

func TestAddFindRemove(t *testing.T) {
	var tb Table[*reg]
	m := mapped(t, 3<<16)
	a, ha := add(t, &tb, m[:1<<16], transport.AccessReadWrite, false, "a")
	c, _ := add(t, &tb, m[2<<16:], transport.AccessRead, false, "c")
	if _, _, err := tb.Add(wrap(t, m[1<<15:3<<15]), transport.AccessRead, false, nil); err == nil {
		t.Fatal("a region overlapping another was registered")
	}
	if _, _, err := tb.Add(wrap(t, m[1<<16:2<<16]), 0, false, nil); !errors.Is(err, ErrAccess) {
		t.Fatalf("access 0: %v", err)
	}
	g, hg := add(t, &tb, m[100:200], transport.AccessRead, true, "grant")
	if hg.ID() == ha.ID() || tb.Len() != 3 || len(tb.All()) != 2 {
		t.Fatalf("ids %d %d, Len %d, All %d", hg.ID(), ha.ID(), tb.Len(), len(tb.All()))
	}
	if r, _ := tb.Get(hg.ID()); r != g {
		t.Fatal("Get(grant) is not the grant")
	}
	for _, tc := range []struct {
		b    []byte
		want *reg
	}{
		{m[100:200], a}, // a grant is never a local buffer's region
		{m[:1<<16], a},
		{m[(1<<16)-1 : 1<<16], a},
		{m[(1<<16)-1 : (1<<16)+1], nil}, // straddles a's end
		{m[1<<16 : (1<<16)+8], nil},     // between the regions
		{m[2<<16:], c},
	} {
		r, _, ok := tb.Find(tc.b)
		if ok != (tc.want != nil) || r != tc.want {
			t.Errorf("Find(%p+%d) = %v %v, want %v", &tc.b[0], len(tc.b), r, ok, tc.want)
		}
	}
	tb.Remove(ha)
	if _, _, ok := tb.Find(m[:8]); ok {
		t.Fatal("Find found a removed region")
	}
	if _, ok := tb.Get(ha.ID()); ok {
		t.Fatal("Get found a removed region")
	}
	if _, ok := tb.Get(hg.ID()); !ok {
		t.Fatal("removing a region dropped its grant: the engine closes grants itself")
	}
}

func TestCheck(t *testing.T) {
	var tb Table[*reg]
	m := mapped(t, 1<<16)
	_, h := add(t, &tb, m, transport.AccessRead, false, "r")
	id, key, base := h.ID(), h.Key(), h.Base()
	res, err := tb.Check(id, key, base+10, 20, transport.AccessRead)
	if err != nil || len(res.Mem) != 20 || &res.Mem[0] != &m[10] || h.Pins() != 1 {
		t.Fatalf("Check = %d bytes, %v; pins %d", len(res.Mem), err, h.Pins())
	}
	res.Release()
	for _, tc := range []struct {
		id        uint32
		key, addr uint64
		n         uint64
		want      transport.Access
		kind      transport.AccessKind
		what      string
	}{
		{id + 1, key, base, 1, transport.AccessRead, transport.UnknownRegion, "unknown"},
		{id, key ^ 1, base, 1, transport.AccessRead, transport.WrongKey, "key"},
		{id, key, base, 1, transport.AccessWrite, transport.NoAccess, "rights"},
		{id, key, base - 1, 1, transport.AccessRead, transport.OutOfRange, "before"},
		{id, key, base + 1<<16 - 4, 5, transport.AccessRead, transport.OutOfRange, "past the end"},
		{id, key, base + 1, ^uint64(0), transport.AccessRead, transport.OutOfRange, "wrapping length"},
	} {
		_, err := tb.Check(tc.id, tc.key, tc.addr, tc.n, tc.want)
		var ae *transport.AccessError
		if !errors.As(err, &ae) || ae.Kind != tc.kind {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.kind)
		}
	}
	if h.Pins() != 0 {
		t.Fatalf("a refused access left %d pins", h.Pins())
	}
	if res, err := tb.Lookup(id, key, transport.AccessRead); err != nil || len(res.Mem) != 1<<16 {
		t.Fatalf("Lookup = %d bytes, %v", len(res.Mem), err)
	} else {
		res.Release()
	}
	h.Retire()
	h.Drain()
	if _, err := tb.Check(id, key, base, 1, transport.AccessRead); err == nil {
		t.Fatal("a retired region was pinned")
	}
}

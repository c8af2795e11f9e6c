package transporttest_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
)

// The test Host is the suite's reference for the target side of the
// contract: each refusal has its kind, and nothing refused is pinned.
func TestHostResolve(t *testing.T) {
	h := transporttest.NewHost(t, false)
	rw := h.NewRegion(8192, transport.AccessReadWrite)
	ro := h.NewRegion(4096, transport.AccessRead)
	if got := len(rw.Bytes()); got != 8192 {
		t.Fatalf("region of %d bytes, want 8192", got)
	}
	cases := []struct {
		name string
		id   uint32
		key  uint64
		addr uint64
		n    uint64
		want transport.Access
		kind transport.AccessKind
	}{
		{"unknown", 999, rw.Key(), rw.Base(), 1, transport.AccessRead, transport.UnknownRegion},
		{"wrong key", rw.ID(), rw.Key() + 1, rw.Base(), 1, transport.AccessRead, transport.WrongKey},
		{"no write", ro.ID(), ro.Key(), ro.Base(), 1, transport.AccessWrite, transport.NoAccess},
		{"no rights asked", rw.ID(), rw.Key(), rw.Base(), 1, 0, transport.NoAccess},
		{"before", rw.ID(), rw.Key(), rw.Base() - 1, 1, transport.AccessRead, transport.OutOfRange},
		{"past end", rw.ID(), rw.Key(), rw.Base() + 8191, 2, transport.AccessRead, transport.OutOfRange},
		{"after end", rw.ID(), rw.Key(), rw.Base() + 8193, 0, transport.AccessRead, transport.OutOfRange},
		{"wrapping", rw.ID(), rw.Key(), rw.Base() + 16, math.MaxUint64 - 8, transport.AccessRead, transport.OutOfRange},
	}
	for _, c := range cases {
		_, err := h.Resolve(c.id, c.key, c.addr, c.n, c.want)
		var ae *transport.AccessError
		if !errors.As(err, &ae) || ae.Kind != c.kind || !errors.Is(err, transport.ErrRemoteAccess) {
			t.Errorf("%s: %v, want %s", c.name, err, c.kind)
		}
	}
	res, err := h.Resolve(rw.ID(), rw.Key(), rw.Base()+8190, 2, transport.AccessWrite)
	if err != nil || len(res.Mem) != 2 || cap(res.Mem) != 2 || res.Region.Base() != rw.Base() || res.Region.Len() != 8192 {
		t.Fatalf("resolve the last 2 bytes: %d bytes (cap %d), %v", len(res.Mem), cap(res.Mem), err)
	}
	// Close waits for the access to be released before it unmaps.
	closed := make(chan error, 1)
	go func() { closed <- rw.Close() }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an access held the region", err)
	default:
	}
	res.Mem[0] = 1 // still mapped
	res.Release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lookup(rw.ID(), rw.Key(), transport.AccessRead); !errors.Is(err, transport.ErrRemoteAccess) {
		t.Fatalf("lookup of a closed region: %v", err)
	}
	whole, err := h.Lookup(ro.ID(), ro.Key(), transport.AccessRead)
	if err != nil || len(whole.Mem) != 4096 || whole.Region.FD() != -1 {
		t.Fatalf("lookup: %d bytes, %v", len(whole.Mem), err)
	}
	whole.Release()
}

// A memfd host's regions carry their memfd, and operations built on them
// name it.
func TestHostMemfd(t *testing.T) {
	h := transporttest.NewHost(t, true)
	r := h.NewRegion(4096, transport.AccessReadWrite)
	res, err := h.Lookup(r.ID(), r.Key(), transport.AccessReadWrite)
	if err != nil || res.Region.FD() < 0 {
		t.Fatalf("lookup: %v, %v", res.Region, err)
	}
	res.Release()
	op := h.Op(transport.OpWrite, r.Bytes()[100:200], transport.RemoteAddr{}, 0, nil)
	if op.Region != r.Handle() || op.Region.FD() != res.Region.FD() || op.Region.Len() != 4096 {
		t.Fatalf("op: region %p (fd %d, %d bytes), want the region's handle %p", op.Region, op.Region.FD(), op.Region.Len(), r.Handle())
	}
}

package shm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
)

// The kernel, not the peer's engine, keeps a peer to a read-only region:
// the peer's mapping of it is read-only (/proc/self/maps says r--s), a store
// through it faults, and the descriptor the owner hands out is opened
// read-only, so a peer that maps it again for writing is refused. A
// read-write region is mapped writable.
func TestReadOnlyMappedReadOnly(t *testing.T) {
	p := transporttest.NewPair(t, func(testing.TB) transport.Transport { return New() }, transporttest.PairConfig{Memfd: true})
	const size = 64 << 10
	ro := p.Acceptor.Host.NewRegion(size, transport.AccessRead)
	rw := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	transporttest.Fill(ro.Bytes(), 1)
	before := bytes.Clone(ro.Bytes())
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	e := p.Dialer.Endpoint.(*Endpoint)

	roMap := mapped(t, e, local, ro, transport.OpRead)
	rwMap := mapped(t, e, local, rw, transport.OpWrite)
	if got := protection(t, roMap); got != "r--s" {
		t.Errorf("the peer's mapping of the read-only region is %s, want r--s", got)
	}
	if got := protection(t, rwMap); got != "rw-s" {
		t.Errorf("the peer's mapping of the read-write region is %s, want rw-s", got)
	}

	// A store through the read-only mapping faults.
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r == nil {
				t.Error("a store into the read-only mapping did not fault")
			} else {
				t.Logf("a store into the read-only mapping: %v", r)
			}
		}()
		roMap[0] ^= 0xff
	}()

	// A peer that takes the owner's descriptor itself and maps it for
	// writing is refused by the kernel.
	fd, err := sys.PidfdGetfd(e.pidfd, ro.Handle().FD())
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close(fd)
	if m, err := sys.MmapShared(fd, size); err == nil {
		sys.Munmap(m)
		t.Error("the read-only region's descriptor could be mapped writable")
	} else if !errors.Is(err, os.ErrPermission) {
		t.Errorf("mapping the read-only region's descriptor writable: %v, want EACCES", err)
	}
	if !bytes.Equal(ro.Bytes(), before) {
		t.Error("the read-only region changed")
	}
}

// mapped runs operations of kind on r until the dialer has mapped it (the
// first takes the stream path while the region is attached), and returns
// the mapping.
func mapped(t *testing.T, e *Endpoint, local, r *transporttest.Region, kind transport.OpKind) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := make(chan struct{})
		op := &transport.Op{Kind: kind, Local: local.Bytes()[:64], Remote: r.At(0), Region: local.Handle(), Done: doneFunc(func(*transport.Op) { close(done) })}
		e.Post([]*transport.Op{op}, true)
		<-done
		if op.Err != nil {
			t.Fatalf("%s of region %d: %v", kind, r.ID(), op.Err)
		}
		e.mu.Lock()
		a := e.att[r.ID()]
		e.mu.Unlock()
		if a != nil && a.mem != nil {
			return a.mem
		}
		if time.Now().After(deadline) {
			t.Fatalf("region %d not mapped after 10s", r.ID())
		}
		time.Sleep(time.Millisecond)
	}
}

// protection is the permissions column of /proc/self/maps for the mapping
// that starts at b.
func protection(t *testing.T, b []byte) string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), start) {
			return strings.Fields(s.Text())[1]
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/maps", start)
	return ""
}

type doneFunc func(*transport.Op)

func (f doneFunc) OpDone(op *transport.Op) { f(op) }

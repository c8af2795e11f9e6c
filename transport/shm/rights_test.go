package shm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
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

// The kernel keeps everyone to a read-only region's rights, not only the
// holder of its read-only descriptor: the owner seals the memfd against
// writes before it hands one out. A peer that takes every descriptor the
// owner holds of the region (its read-write memfd too, as a process that
// may use pidfd_getfd can), and opens each again writable through
// /proc/self/fd, which the kernel allows for a memfd (mode 0777), still
// cannot map it writable, write it, punch a hole in it or truncate it. The
// owner's own mapping stays writable. What the kernel does not stop, and
// docs/SECURITY.md says so: a process that may take the owner's
// descriptors may also write the owner's memory through /proc/PID/mem
// (or ptrace, or process_vm_writev), and so reaches the region through
// the owner's writable mapping.
func TestReadOnlyRegionSealed(t *testing.T) {
	p := transporttest.NewPair(t, func(testing.TB) transport.Transport { return New() }, transporttest.PairConfig{Memfd: true})
	const size = 64 << 10
	ro := p.Acceptor.Host.NewRegion(size, transport.AccessRead)
	transporttest.Fill(ro.Bytes(), 3)
	before := bytes.Clone(ro.Bytes())
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	e := p.Dialer.Endpoint.(*Endpoint)
	mapped(t, e, local, ro, transport.OpRead)

	// Every descriptor of the region's memfd in the owner (this test's
	// process plays both), found the way a hostile peer would: by
	// listing /proc/PID/fd.
	owner := os.Getpid()
	roFile, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%d", owner, ro.Handle().FD()))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", owner))
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, ent := range ents {
		n, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/fd/%d", owner, n)); err == nil && os.SameFile(fi, roFile) {
			fds = append(fds, n)
		}
	}
	if len(fds) < 2 {
		t.Fatalf("the owner holds descriptors %v of the region's memfd: want its own and the read-only one", fds)
	}
	for _, n := range fds {
		taken, err := sys.PidfdGetfd(e.pidfd, n)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := sys.MmapShared(taken, size); err == nil {
			sys.Munmap(m)
			t.Errorf("the owner's descriptor %d, taken, maps writable", n)
		}
		// Open it again writable: for a memfd of mode 0777 the kernel
		// allows that, also from the read-only descriptor.
		f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", taken), os.O_RDWR, 0)
		sys.Close(taken)
		if err != nil {
			t.Logf("descriptor %d: opening it again writable: %v", n, err)
			continue
		}
		if _, err := f.WriteAt([]byte("hostile"), 0); err == nil {
			t.Errorf("descriptor %d, opened again writable: a write went through", n)
		}
		if err := f.Truncate(0); err == nil {
			t.Errorf("descriptor %d, opened again writable: truncated", n)
		}
		if m, err := sys.MmapShared(int(f.Fd()), size); err == nil {
			sys.Munmap(m)
			t.Errorf("descriptor %d, opened again writable, maps writable", n)
		} else {
			t.Logf("descriptor %d, opened again writable, mapped writable: %v", n, err)
		}
		if m, err := sys.MmapSharedReadOnly(int(f.Fd()), size); err != nil {
			t.Errorf("descriptor %d, opened again writable, maps read-only: %v", n, err)
		} else {
			if got := protection(t, m); got != "r--s" {
				t.Errorf("descriptor %d: a read-only mapping is %s", n, got)
			}
			sys.Munmap(m)
		}
		f.Close()
	}
	if !bytes.Equal(ro.Bytes(), before) {
		t.Fatal("the read-only region changed")
	}

	// The owner's mapping, made before the seal, still writes.
	ro.Bytes()[0] ^= 0xff
	ro.Bytes()[0] ^= 0xff

	// The limit: whoever may take the owner's descriptors may also write
	// its memory, the region through the owner's own mapping included.
	mf, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", owner), os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /proc/PID/mem to write: %v", err)
	}
	defer mf.Close()
	if _, err := mf.WriteAt([]byte{^before[0]}, int64(ro.Base())); err != nil {
		t.Logf("writing the owner's memory through /proc/%d/mem: %v", owner, err)
	} else if ro.Bytes()[0] != ^before[0] {
		t.Error("a write through /proc/PID/mem succeeded but the region did not change")
	} else {
		t.Logf("a write through /proc/%d/mem into the owner's mapping went through, as docs/SECURITY.md says", owner)
		ro.Bytes()[0] = before[0]
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

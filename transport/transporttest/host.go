package transporttest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Host is a transport.Host for tests: the local side of a pair of
// endpoints, without an engine. It owns registered regions (mmap'd by
// package mem, never the Go heap), each with an ID, a random key and rights,
// and checks every remote access against them. Deliver copies incoming
// messages into a queue that Recv takes from; Notify queues notifications
// for WaitNotify.
//
// Its methods are safe for concurrent use. Deliver and Notify never block.
type Host struct {
	tb    testing.TB
	memfd bool

	mu         sync.Mutex
	regions    map[uint32]*Region
	next       uint32
	endpoints  []transport.Endpoint  // told of revocations
	registrars []transport.Registrar // told of every region added and removed

	msgs  queue[[]byte]
	notes queue[transport.Notification]

	// onNotify, when set, runs inside Notify, on the transport's receive
	// path, before the notification is queued.
	onNotify atomic.Pointer[func(transport.Notification)]
}

var _ transport.Host = (*Host)(nil)

// NewHost returns an empty host. With memfd, its regions are memfd-backed,
// mapped shared (what the shm transport maps in the peer's process, and
// what the tcp transport sends WRITEs from by reference); otherwise they
// are private anonymous memory. Regions still open when the test ends are
// closed then.
func NewHost(tb testing.TB, memfd bool) *Host {
	h := &Host{tb: tb, memfd: memfd, regions: map[uint32]*Region{}}
	h.msgs.init()
	h.notes.init()
	tb.Cleanup(h.closeAll)
	return h
}

// closeAll closes every region still open.
func (h *Host) closeAll() {
	h.mu.Lock()
	rs := make([]*Region, 0, len(h.regions))
	for _, r := range h.regions {
		if r.grant { // grants first: their memory is another region's
			rs = append([]*Region{r}, rs...)
		} else {
			rs = append(rs, r)
		}
	}
	h.mu.Unlock()
	for _, r := range rs {
		if err := r.Close(); err != nil {
			h.tb.Error(err)
		}
	}
}

// Memfd reports whether the host's regions are memfd-backed.
func (h *Host) Memfd() bool { return h.memfd }

// Attach makes h tell ep of revoked regions and, when t registers memory
// with a device (transport.Registrar), tell t of every region registered
// and deregistered, as an engine does. NewPair calls it.
func (h *Host) Attach(ep transport.Endpoint, t transport.Transport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endpoints = append(h.endpoints, ep)
	if rg, ok := t.(transport.Registrar); ok {
		h.registrars = append(h.registrars, rg)
		for _, r := range h.regions {
			rg.RegionAdded(r.hd)
		}
	}
}

// Region is registered memory of a Host.
type Region struct {
	h     *Host
	mr    *mem.Region
	hd    *mem.Handle // id, key, rights, pins
	grant bool        // a part of another region (Grant): never a local buffer's
	once  sync.Once
}

// NewRegion maps size bytes and registers them with the given rights.
func (h *Host) NewRegion(size int, access transport.Access) *Region {
	h.tb.Helper()
	mr, err := mem.NewRegion(mem.RegionOptions{Size: size, Shared: h.memfd, Name: "xfer-transporttest"})
	if err != nil {
		h.tb.Fatalf("map a region of %d bytes: %v", size, err)
	}
	var k [8]byte
	if _, err := rand.Read(k[:]); err != nil {
		h.tb.Fatal(err)
	}
	r := &Region{h: h, mr: mr}
	h.mu.Lock()
	h.next++
	r.hd = mem.NewHandle(mr, h.next, binary.LittleEndian.Uint64(k[:]), access)
	h.regions[r.hd.ID()] = r
	for _, rg := range h.registrars {
		rg.RegionAdded(r.hd)
	}
	h.mu.Unlock()
	return r
}

// Grant registers n bytes at off of r as a region of their own, with
// access (no more than r's), as an engine registers a grant: its own ID,
// key and handle, no memfd (a peer cannot map a part of one), the memory
// r's. Close it before r.
func (r *Region) Grant(off, n int, access transport.Access) *Region {
	h := r.h
	h.tb.Helper()
	mr, err := mem.WrapRegion(r.mr.Bytes()[off : off+n])
	if err != nil {
		h.tb.Fatal(err)
	}
	var k [8]byte
	if _, err := rand.Read(k[:]); err != nil {
		h.tb.Fatal(err)
	}
	g := &Region{h: h, mr: mr, grant: true}
	h.mu.Lock()
	h.next++
	g.hd = mem.NewHandle(mr, h.next, binary.LittleEndian.Uint64(k[:]), access)
	h.regions[g.hd.ID()] = g
	for _, rg := range h.registrars {
		rg.RegionAdded(g.hd)
	}
	h.mu.Unlock()
	return g
}

// ID is the region's number in its host.
func (r *Region) ID() uint32 { return r.hd.ID() }

// Key is the region's key.
func (r *Region) Key() uint64 { return r.hd.Key() }

// Access is what the region grants to peers.
func (r *Region) Access() transport.Access { return r.hd.Access() }

// Base is the address of the region's first byte.
func (r *Region) Base() uint64 { return r.hd.Base() }

// Bytes is the region's memory (nil once closed).
func (r *Region) Bytes() []byte { return r.mr.Bytes() }

// At is the remote address off bytes into the region.
func (r *Region) At(off uint64) transport.RemoteAddr {
	return transport.RemoteAddr{Region: r.hd.ID(), Addr: r.hd.Base() + off, Key: r.hd.Key()}
}

// Handle is the region's handle, as operations and transports see it.
func (r *Region) Handle() *mem.Handle { return r.hd }

// Close deregisters the region the way an engine does: it leaves the
// table (Resolve and Lookup refuse it from now on), every attached endpoint
// is told (Endpoint.Revoke), accesses in progress finish, transports that
// registered it with a device forget it, and only then is it unmapped.
// Idempotent.
func (r *Region) Close() error {
	var err error
	r.once.Do(func() {
		h := r.h
		r.hd.Retire() // no new access pins it
		h.mu.Lock()
		delete(h.regions, r.hd.ID())
		eps := append([]transport.Endpoint(nil), h.endpoints...)
		rgs := append([]transport.Registrar(nil), h.registrars...)
		h.mu.Unlock()
		for _, ep := range eps {
			ep.Revoke(r.hd.ID())
		}
		deadline := time.Now().Add(time.Minute)
		for r.hd.Pins() > 0 {
			if time.Now().After(deadline) {
				err = fmt.Errorf("region %d: a remote access never released it (Resolved.Release not called)", r.hd.ID())
				return // leave it mapped: it may still be touched
			}
			time.Sleep(50 * time.Microsecond)
		}
		for _, rg := range rgs {
			rg.RegionRemoved(r.hd)
		}
		err = r.mr.Close()
	})
	return err
}

// Resolve implements transport.Host: it checks region, key, rights and
// bounds, in that order, and pins the region until Release.
func (h *Host) Resolve(id uint32, key, addr, n uint64, want transport.Access) (transport.Resolved, error) {
	refuse := func(k transport.AccessKind) (transport.Resolved, error) {
		return transport.Resolved{}, &transport.AccessError{Kind: k, Want: want, Region: id, Addr: addr, Len: n}
	}
	h.mu.Lock()
	r := h.regions[id]
	h.mu.Unlock()
	switch {
	case r == nil:
		return refuse(transport.UnknownRegion)
	case r.hd.Key() != key:
		return refuse(transport.WrongKey)
	case want == 0 || r.hd.Access()&want != want:
		return refuse(transport.NoAccess)
	}
	base, size := r.hd.Base(), r.hd.Len()
	if addr < base || addr-base > size || n > size-(addr-base) {
		return refuse(transport.OutOfRange)
	}
	if !r.hd.Pin() {
		return refuse(transport.UnknownRegion) // being closed
	}
	off := addr - base
	return transport.Resolved{Mem: r.hd.Bytes()[off : off+n : off+n], Region: r.hd}, nil
}

// Lookup implements transport.Host: Resolve of the whole region.
func (h *Host) Lookup(id uint32, key uint64, want transport.Access) (transport.Resolved, error) {
	h.mu.Lock()
	r := h.regions[id]
	h.mu.Unlock()
	if r == nil {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.UnknownRegion, Want: want, Region: id}
	}
	return h.Resolve(id, key, r.hd.Base(), r.hd.Len(), want)
}

// Deliver implements transport.Host: it copies msg (only lent) into the
// receive queue. The receiver returns the credit with Endpoint.Consumed
// once it took the message (Side.Recv does).
func (h *Host) Deliver(_ transport.Endpoint, msg []byte) {
	h.msgs.push(append([]byte(nil), msg...))
}

// Notify implements transport.Host: it runs the hook set with OnNotify,
// then queues n for WaitNotify.
func (h *Host) Notify(_ transport.Endpoint, n transport.Notification) {
	if f := h.onNotify.Load(); f != nil {
		(*f)(n)
	}
	h.notes.push(n)
}

// OnNotify sets a function that Notify runs on the transport's receive
// path, before it queues the notification: a test checks there that the
// data is already in place. nil removes it.
func (h *Host) OnNotify(f func(transport.Notification)) {
	if f == nil {
		h.onNotify.Store(nil)
		return
	}
	h.onNotify.Store(&f)
}

// Recv returns the next delivered message, waiting until ctx ends.
func (h *Host) Recv(ctx context.Context) ([]byte, error) { return h.msgs.pop(ctx) }

// WaitNotify returns the next notification, waiting until ctx ends.
func (h *Host) WaitNotify(ctx context.Context) (transport.Notification, error) {
	return h.notes.pop(ctx)
}

// Queued is the number of delivered messages not yet taken by Recv.
func (h *Host) Queued() int { return h.msgs.len() }

// Notifications is the number of notifications not yet taken.
func (h *Host) Notifications() int { return h.notes.len() }

// Op builds an operation on local, which must lie in one of h's regions:
// it fills in the registered region that holds local, as an engine does.
// Every operation of the suite is built here.
func (h *Host) Op(kind transport.OpKind, local []byte, remote transport.RemoteAddr, imm uint32, done transport.Completer) *transport.Op {
	h.tb.Helper()
	op := &transport.Op{Kind: kind, Local: local, Remote: remote, Imm: imm, Done: done}
	r := h.holding(local)
	if r == nil {
		h.tb.Fatalf("op %s: local buffer %p+%d lies in no region of the host", kind, unsafe.SliceData(local), len(local))
	}
	op.Region = r.hd
	return op
}

// holding finds the region holding b.
func (h *Host) holding(b []byte) *Region {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.regions {
		if _, ok := r.mr.Contains(b); ok && !r.grant {
			return r
		}
	}
	return nil
}

// queue is an unbounded FIFO: a transport's receive path must never block
// on a slow test.
type queue[T any] struct {
	mu     sync.Mutex
	q      []T
	signal chan struct{}
}

func (q *queue[T]) init() { q.signal = make(chan struct{}, 1) }

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.q = append(q.q, v)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *queue[T]) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

func (q *queue[T]) pop(ctx context.Context) (T, error) {
	for {
		q.mu.Lock()
		if len(q.q) > 0 {
			v := q.q[0]
			var zero T
			q.q[0] = zero
			q.q = q.q[1:]
			more := len(q.q) > 0
			q.mu.Unlock()
			if more {
				select {
				case q.signal <- struct{}{}:
				default:
				}
			}
			return v, nil
		}
		q.mu.Unlock()
		select {
		case <-q.signal:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}

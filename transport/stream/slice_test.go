package stream

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// sliceHost serves WRITEs and READs of one region, addressed by offset.
// Accesses of one byte or more wait for gate (the checks of a sliced
// operation, which are empty, do not).
type sliceHost struct {
	mr   *mem.Region
	gate chan struct{}
}

func (h *sliceHost) Resolve(id uint32, key, addr, n uint64, want transport.Access) (transport.Resolved, error) {
	if n > 0 {
		<-h.gate
	}
	if addr > uint64(h.mr.Len()) || n > uint64(h.mr.Len())-addr {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.OutOfRange, Want: want, Region: id, Addr: addr, Len: n}
	}
	return transport.Resolved{Mem: h.mr.Bytes()[addr : addr+n]}, nil
}

func (h *sliceHost) Lookup(uint32, uint64, transport.Access) (transport.Resolved, error) {
	return transport.Resolved{}, errors.New("no attachments here")
}
func (h *sliceHost) Deliver(transport.Endpoint, []byte)                {}
func (h *sliceHost) Notify(transport.Endpoint, transport.Notification) {}

// multiPair connects an initiator stream of conns connections to a target
// stream whose host is host, over real TCP on loopback.
func multiPair(t *testing.T, conns int, host transport.Host) (initiator, target *Stream) {
	t.Helper()
	var as, bs []net.Conn
	for range conns {
		a, b := tcpPair(t)
		b.SetReadDeadline(time.Time{})
		as, bs = append(as, a), append(bs, b)
	}
	extra := func(cs []net.Conn) func(context.Context) (net.Conn, error) {
		i := 0
		return func(context.Context) (net.Conn, error) { i++; return cs[i], nil }
	}
	p := transport.Params{Conns: conns, MaxMessage: 4096, RecvDepth: 8}
	pa, pb := p, p
	pa.Role, pa.Conn, pa.DialExtra, pa.Host = transport.Dialer, as[0], extra(as), &gatedHost{gate: make(chan struct{})}
	pb.Role, pb.Conn, pb.AcceptExtra, pb.Host = transport.Acceptor, bs[0], extra(bs), host
	return openPair(t, pa, pb, Options{})
}

func newRegion(t *testing.T, size int, name string) *mem.Region {
	t.Helper()
	r, err := mem.NewRegion(mem.RegionOptions{Size: size, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// moved reports the bytes each connection of e moved (TCP_INFO: acked
// plus received).
func moved(t *testing.T, e *Stream) []uint64 {
	t.Helper()
	out := make([]uint64, len(e.conns))
	for i, c := range e.conns {
		n, err := sys.TCPMoved(c.rc)
		if err != nil {
			t.Skipf("no TCP_INFO here: %v", err)
		}
		out[i] = n
	}
	return out
}

func waitOp(t *testing.T, done opDone) *transport.Op {
	t.Helper()
	select {
	case op := <-done:
		return op
	case <-time.After(time.Minute):
		t.Fatal("the operation did not complete")
		return nil
	}
}

// TestLargeOpSpreadsOverConnections: one large WRITE, and one large READ,
// each move over every bulk connection (all but the first), as the
// kernel's per-connection byte counts show, with the data intact; and the
// operation counts once, whole.
func TestLargeOpSpreadsOverConnections(t *testing.T) {
	const size = 16 << 20
	for _, conns := range []int{3, 5} {
		src := newRegion(t, size, "spread-src")
		dst := newRegion(t, size, "spread-dst")
		host := &sliceHost{mr: dst, gate: make(chan struct{})}
		close(host.gate)
		ea, _ := multiPair(t, conns, host)
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i*7 + i>>12)
		}
		for _, kind := range []transport.OpKind{transport.OpWrite, transport.OpRead} {
			if kind == transport.OpRead {
				clear(src.Bytes())
			}
			before := moved(t, ea)
			done := make(opDone, 1)
			op := &transport.Op{Kind: kind, Local: src.Bytes(), Done: done}
			ea.Post([]*transport.Op{op}, false)
			if got := waitOp(t, done); got != op || got.Err != nil {
				t.Fatalf("%d connections, %s: completed %p (%v), want %p without error", conns, kind, got, got.Err, op)
			}
			if !bytes.Equal(src.Bytes(), dst.Bytes()) {
				t.Fatalf("%d connections, %s: data differs", conns, kind)
			}
			after := moved(t, ea)
			per := uint64(size / (conns - 1))
			for i := 1; i < conns; i++ {
				if d := after[i] - before[i]; d < per/2 {
					t.Errorf("%d connections, %s: connection %d moved %d bytes, want about %d", conns, kind, i, d, per)
				}
			}
			if d := after[0] - before[0]; d > 1<<20 {
				t.Errorf("%d connections, %s: the first connection moved %d bytes; bulk data belongs on the others", conns, kind, d)
			}
		}
		c := ea.Counts()
		if c.Ops[transport.OpWrite] != 1 || c.Ops[transport.OpRead] != 1 || c.Sent != size || c.Received != size {
			t.Errorf("%d connections: counts %+v, want one WRITE and one READ of %d bytes each", conns, c, size)
		}
	}
}

// TestSlicedRefusedWhole: a WRITE whose last bytes lie past the end of the
// target's region is refused before any slice moves: nothing is touched,
// and the error names the whole operation's range.
func TestSlicedRefusedWhole(t *testing.T) {
	const size = 8 << 20
	src := newRegion(t, size, "refused-src")
	dst := newRegion(t, size, "refused-dst")
	for i := range dst.Bytes() {
		dst.Bytes()[i] = 0x5a
	}
	host := &sliceHost{mr: dst, gate: make(chan struct{})}
	close(host.gate)
	ea, _ := multiPair(t, 3, host)
	done := make(opDone, 1)
	op := &transport.Op{Kind: transport.OpWrite, Local: src.Bytes(), Remote: transport.RemoteAddr{Region: 7, Addr: 4096}, Done: done}
	ea.Post([]*transport.Op{op}, false)
	waitOp(t, done)
	var ae *transport.AccessError
	if !errors.As(op.Err, &ae) || ae.Kind != transport.OutOfRange || ae.Addr != 4096 || ae.Len != size || ae.Region != 7 {
		t.Fatalf("error %v, want an OutOfRange AccessError for region 7 at 4096, %d bytes", op.Err, size)
	}
	if bytes.Count(dst.Bytes(), []byte{0x5a}) != size {
		t.Fatal("a refused WRITE touched the target's memory")
	}
	if c := ea.Counts(); c.Sent != 0 {
		t.Fatalf("a refused WRITE counted %d bytes sent", c.Sent)
	}
	select {
	case <-ea.Done():
		t.Fatalf("the stream went down: %v", ea.Err())
	default:
	}
}

// TestSliceConnectionLost: a connection lost while the slices of a WRITE
// are on their way fails the whole operation, once, with the stream's
// error; nothing counts as sent, later operations fail at once, and
// Close leaves no goroutine behind (TestMain checks).
func TestSliceConnectionLost(t *testing.T) {
	const size = 64 << 20
	src := newRegion(t, size, "lost-src")
	dst := newRegion(t, size, "lost-dst")
	host := &sliceHost{mr: dst, gate: make(chan struct{})}
	open := sync.OnceFunc(func() { close(host.gate) })
	ea, _ := multiPair(t, 3, host)
	t.Cleanup(open) // before the streams close: the target's read loops wait on it
	done := make(opDone, 2)
	op := &transport.Op{Kind: transport.OpWrite, Local: src.Bytes(), Done: done}
	// Posted from a goroutine: an unsliced WRITE would block Post until
	// its payload is in the socket, which the target does not read yet.
	go ea.Post([]*transport.Op{op}, false)
	// The target holds its read loops before the slices' payloads (gate):
	// wait until both bulk connections carry part of theirs, so that the
	// slices are cut off midway.
	deadline := time.Now().Add(20 * time.Second)
	for {
		m := moved(t, ea)
		if m[1] > 64<<10 && m[2] > 64<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slices did not start moving: %v bytes per connection", m)
		}
		time.Sleep(time.Millisecond)
	}
	if ea.Cancel(op) {
		t.Fatal("a sliced WRITE was cancelled while its slices were being written")
	}
	ea.conns[2].nc.Close()
	got := waitOp(t, done)
	var le *transport.LinkError
	if got != op || !errors.As(op.Err, &le) {
		t.Fatalf("completed %p (%v), want %p with a LinkError", got, op.Err, op)
	}
	select {
	case <-ea.Done():
	case <-time.After(time.Minute):
		t.Fatal("the stream stayed up after losing a connection")
	}
	if c := ea.Counts(); c.Sent != 0 {
		t.Fatalf("%d bytes counted as sent for a failed WRITE", c.Sent)
	}
	again := &transport.Op{Kind: transport.OpWrite, Local: src.Bytes(), Done: done}
	ea.Post([]*transport.Op{again}, false)
	if got := waitOp(t, done); got != again || got.Err == nil {
		t.Fatalf("a WRITE posted after the loss: completed %p (%v), want %p failed", got, got.Err, again)
	}
	open()
	ea.Close()
	select {
	case op := <-done:
		t.Fatalf("an operation completed twice (%p, %v)", op, op.Err)
	case <-time.After(50 * time.Millisecond):
	}
}

package stream

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// gatedHost is the target's side of an endpoint in these tests: it serves
// WRITEs into one region, addressed by offset, once gate is closed.
type gatedHost struct {
	mr   *mem.Region
	gate chan struct{}
}

func (h *gatedHost) Resolve(id uint32, key, addr, n uint64, want transport.Access) (transport.Resolved, error) {
	<-h.gate
	if addr+n > uint64(h.mr.Len()) {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.OutOfRange, Want: want, Region: id, Addr: addr, Len: n}
	}
	return transport.Resolved{Mem: h.mr.Bytes()[addr : addr+n]}, nil
}

func (h *gatedHost) Lookup(id uint32, key uint64, want transport.Access) (transport.Resolved, error) {
	return transport.Resolved{}, errors.New("no attachments here")
}

func (h *gatedHost) Deliver(transport.Endpoint, []byte)                {}
func (h *gatedHost) Notify(transport.Endpoint, transport.Notification) {}

type opDone chan *transport.Op

func (c opDone) OpDone(op *transport.Op) { c <- op }

// streamPair connects an initiator stream to a target stream whose host is
// host.
func streamPair(t *testing.T, host transport.Host) (initiator *Stream) {
	t.Helper()
	a, b := tcpPair(t)
	b.SetReadDeadline(time.Time{})
	p := transport.Params{Conns: 1, MaxMessage: 4096, RecvDepth: 8}
	pa, pb := p, p
	// The initiator serves nothing in these tests.
	pa.Role, pa.Conn, pa.Host = transport.Dialer, a, &gatedHost{gate: make(chan struct{})}
	pb.Role, pb.Conn, pb.Host = transport.Acceptor, b, host
	ea, _ := openPair(t, pa, pb, Options{})
	return ea
}

// openPair opens the streams of pa (with options oa) and pb; they close
// when the test ends.
func openPair(t *testing.T, pa, pb transport.Params, oa Options) (ea, eb *Stream) {
	t.Helper()
	ea, err := New(context.Background(), pa, oa)
	if err != nil {
		t.Fatal(err)
	}
	eb, err = New(context.Background(), pb, Options{})
	if err != nil {
		ea.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close(); eb.Close() })
	return ea, eb
}

// TestWriteByReferenceNotCancelled: a WRITE whose data goes out from its
// region's memfd by reference cannot be cancelled while the target has not
// answered (the kernel still reads its memory); it completes, with the data
// in place. A WRITE below the threshold, copied into the socket, can.
func TestWriteByReferenceNotCancelled(t *testing.T) {
	src, err := mem.NewRegion(mem.RegionOptions{Size: 1 << 20, Shared: true, Name: "write-ref-src"})
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the streams (cleanups run last-in first-out): the
	// target may still be writing into dst when the test returns.
	t.Cleanup(func() { src.Close() })
	dst, err := mem.NewRegion(mem.RegionOptions{Size: 1 << 20, Name: "write-ref-dst"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 13)
	}
	host := &gatedHost{mr: dst, gate: make(chan struct{})}
	ep := streamPair(t, host)
	open := sync.OnceFunc(func() { close(host.gate) })
	t.Cleanup(open) // before the streams close: the target's read loop waits on it
	done := make(opDone, 2)
	region := mem.NewHandle(src, 1, 0, mem.AccessReadWrite)
	byRef := &transport.Op{Kind: transport.OpWrite, Local: src.Bytes()[:sendFileMin], Region: region, Done: done}
	copied := &transport.Op{Kind: transport.OpWrite, Local: src.Bytes()[sendFileMin : sendFileMin+4096], Region: region,
		Remote: transport.RemoteAddr{Addr: sendFileMin}, Done: done}
	ep.Post([]*transport.Op{byRef, copied}, false)
	if ep.Cancel(byRef) {
		t.Fatal("a WRITE sent by reference was cancelled before the target answered")
	}
	if !ep.Cancel(copied) {
		t.Fatal("a small WRITE, copied into the socket, could not be cancelled")
	}
	open()
	select {
	case op := <-done:
		if op != byRef || op.Err != nil {
			t.Fatalf("completed %p (%v), want the WRITE sent by reference (%p) without error", op, op.Err, byRef)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the WRITE sent by reference did not complete")
	}
	if !bytes.Equal(dst.Bytes()[:sendFileMin], src.Bytes()[:sendFileMin]) {
		t.Fatal("the target's memory differs from what was written")
	}
	select {
	case op := <-done:
		t.Fatalf("the cancelled WRITE completed (%v)", op.Err)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestAppendSendWriteError: a send appended straight into the connection
// (AppendSend, which holds the stream's lock while it writes) that fails to
// write returns the error and takes the stream down; it used to deadlock,
// the write error's handler taking the lock its caller held (a consumer's
// Close syncing with a producer that had closed first hung).
func TestAppendSendWriteError(t *testing.T) {
	// The other end is a bare connection that stays open and sends
	// nothing: the stream's read loop waits, and only the write fails.
	a, b := tcpPair(t)
	b.SetReadDeadline(time.Time{})
	p := transport.Params{Conns: 1, MaxMessage: 4096, RecvDepth: 8}
	p.Role, p.Conn, p.Host = transport.Dialer, a, &gatedHost{gate: make(chan struct{})}
	ea, err := New(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() })
	if err := a.CloseWrite(); err != nil { // every later write fails; reads go on
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ea.AppendSend(64, func(b []byte) []byte { return append(b, "sync"...) })
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("AppendSend on a connection that cannot be written reported no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AppendSend hung on a write error (deadlock)")
	}
	select {
	case <-ea.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not go down after its write error")
	}
}

// BeforeDown runs before anything sees the stream down, when the peer
// goes (its EOF) and on Fail; Fail's error is the stream's, as the cause
// of a LinkError; OnDown follows once.
func TestFailAndBeforeDown(t *testing.T) {
	for _, how := range []string{"peer closes", "fail"} {
		t.Run(how, func(t *testing.T) {
			a, b := tcpPair(t)
			b.SetReadDeadline(time.Time{})
			p := transport.Params{Conns: 1, MaxMessage: 4096, RecvDepth: 8}
			pa, pb := p, p
			pa.Role, pa.Conn, pa.Host = transport.Dialer, a, &gatedHost{gate: make(chan struct{})}
			pb.Role, pb.Conn, pb.Host = transport.Acceptor, b, &gatedHost{gate: make(chan struct{})}
			var mu sync.Mutex
			var events []string
			var ea *Stream
			opts := Options{
				BeforeDown: func() {
					mu.Lock()
					defer mu.Unlock()
					select {
					case <-ea.Done():
						events = append(events, "before, seen down")
					default:
						events = append(events, "before")
					}
				},
				OnDown: func(error) { mu.Lock(); events = append(events, "down"); mu.Unlock() },
			}
			var eb *Stream
			ea, eb = openPair(t, pa, pb, opts)
			mu.Lock() // ea is set: BeforeDown may read it
			mu.Unlock()
			bad := errors.New("the peer wrote nonsense on another path")
			if how == "fail" {
				ea.Fail(bad)
			} else {
				eb.Close()
			}
			select {
			case <-ea.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the stream is still up")
			}
			ea.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(events) < 2 || events[0] != "before" || events[len(events)-1] != "down" {
				t.Fatalf("events %q: want before first, down last", events)
			}
			for _, e := range events[1 : len(events)-1] {
				if e != "before" {
					t.Fatalf("events %q", events)
				}
			}
			var le *transport.LinkError
			if err := ea.Err(); !errors.As(err, &le) || (how == "fail" && !errors.Is(err, bad)) {
				t.Fatalf("Err %v", err)
			}
		})
	}
}

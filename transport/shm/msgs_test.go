package shm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/shm"
	"github.com/xferio/xfer/transport/transporttest"
)

const waitFor = 10 * time.Second

// done is a Completer that hands the operation over.
type done chan *transport.Op

func (d done) OpDone(op *transport.Op) { d <- op }

func (d done) wait(t *testing.T) *transport.Op {
	t.Helper()
	select {
	case op := <-d:
		return op
	case <-time.After(waitFor):
		t.Fatal("operation never completed")
		return nil
	}
}

func ringPair(t *testing.T, c transporttest.PairConfig) *transporttest.Pair {
	t.Helper()
	c.Memfd = true
	p := transporttest.NewPair(t, newSHM, c)
	if !shm.UsesRing(p.Dialer.Endpoint) || !shm.UsesRing(p.Acceptor.Endpoint) {
		t.Fatal("the endpoints do not use the message ring")
	}
	return p
}

func until(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Messages and write-with-notify notifications share the ring, in posting
// order: when notification i arrives its data is in place and messages
// 0..i have arrived, also while the ring is full and entries wait for
// space (messages of 30 KiB, far more than the ring holds).
func TestRingOrderWithNotify(t *testing.T) {
	const n, size = 48, 30 << 10
	p := ringPair(t, transporttest.PairConfig{RecvDepth: n})
	src := p.Dialer.Host.NewRegion(n*size, transport.AccessReadWrite)
	dst := p.Acceptor.Host.NewRegion(n*size, transport.AccessReadWrite)
	for i := range n * size {
		src.Bytes()[i] = byte(i / size)
	}
	bad := make(chan string, n)
	p.Acceptor.Host.OnNotify(func(note transport.Notification) {
		i := int(note.Value)
		if q := p.Acceptor.Host.Queued(); q != i+1 {
			bad <- fmt.Sprintf("notification %d with %d messages delivered, want %d", i, q, i+1)
		}
		if d := dst.Bytes()[i*size : (i+1)*size]; !bytes.Equal(d, src.Bytes()[i*size:(i+1)*size]) {
			bad <- fmt.Sprintf("notification %d before its data", i)
		}
	})
	// Prime the attachment: the first WRITE of a region takes the stream.
	d := make(done, 2*n)
	p.Dialer.Endpoint.Post([]*transport.Op{p.Dialer.Host.Op(transport.OpWrite, src.Bytes()[:8], dst.At(0), 0, d)}, true)
	if op := d.wait(t); op.Err != nil {
		t.Fatal(op.Err)
	}
	until(t, "the region is mapped", func() bool { return shm.Attached(p.Dialer.Endpoint, dst.ID()) })
	var ops []*transport.Op
	for i := range n {
		b := src.Bytes()[i*size : (i+1)*size]
		ops = append(ops,
			p.Dialer.Host.Op(transport.OpSend, b, transport.RemoteAddr{}, 0, d),
			p.Dialer.Host.Op(transport.OpWriteImm, b, dst.At(uint64(i*size)), uint32(i), d))
	}
	p.Dialer.Endpoint.Post(ops, false)
	for range ops {
		if op := d.wait(t); op.Err != nil {
			t.Fatal(op.Err)
		}
	}
	until(t, "every notification arrived", func() bool { return p.Acceptor.Host.Notifications() == n })
	close(bad)
	for s := range bad {
		t.Error(s)
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		m, err := p.Acceptor.Host.Recv(ctx)
		cancel()
		if err != nil || !bytes.Equal(m, src.Bytes()[i*size:(i+1)*size]) {
			t.Fatalf("message %d: %v", i, err)
		}
		p.Acceptor.Endpoint.Consumed(1)
	}
}

// With no credit left, SENDs wait; each message consumed lets one more
// go, in order. What waits counts as pending (Progress).
func TestRingCredits(t *testing.T) {
	const depth, total = 4, 16
	p := ringPair(t, transporttest.PairConfig{RecvDepth: depth, MaxMessage: 256})
	buf := p.Dialer.Host.NewRegion(total*256, transport.AccessReadWrite)
	d := make(done, total)
	var ops []*transport.Op
	for i := range total {
		b := buf.Bytes()[i*256 : (i+1)*256]
		b[0] = byte(i)
		ops = append(ops, p.Dialer.Host.Op(transport.OpSend, b, transport.RemoteAddr{}, 0, d))
	}
	p.Dialer.Endpoint.Post(ops, false)
	until(t, "depth messages arrived", func() bool { return p.Acceptor.Host.Queued() == depth })
	time.Sleep(20 * time.Millisecond)
	if q := p.Acceptor.Host.Queued(); q != depth {
		t.Fatalf("%d messages arrived, receive depth %d", q, depth)
	}
	if _, pending := p.Dialer.Endpoint.(transport.Progresser).Progress(); pending != total-depth {
		t.Fatalf("%d sends pending, want %d", pending, total-depth)
	}
	// AppendSend declines while sends wait for credit.
	if ok, err := p.Dialer.Endpoint.(transport.Appender).AppendSend(8, func(b []byte) []byte { return append(b, 1) }); ok || err != nil {
		t.Fatalf("AppendSend with no credit: %v, %v", ok, err)
	}
	for i := range total {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		m, err := p.Acceptor.Host.Recv(ctx)
		cancel()
		if err != nil || m[0] != byte(i) {
			t.Fatalf("message %d: %v, %v", i, m, err)
		}
		p.Acceptor.Endpoint.Consumed(1)
	}
	for range total {
		if op := d.wait(t); op.Err != nil {
			t.Fatal(op.Err)
		}
	}
}

// Close wakes a ring reader that sleeps on its doorbell and waits for it
// (TestMain fails the package on a goroutine left behind).
func TestRingCloseWhileSleeping(t *testing.T) {
	p := ringPair(t, transporttest.PairConfig{})
	ep := p.Acceptor.Endpoint
	until(t, "the reader sleeps", func() bool { return shm.RingAsleep(ep) })
	closed := make(chan struct{})
	go func() { ep.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(waitFor):
		t.Fatal("Close did not return")
	}
}

// A peer that goes away while this side's reader sleeps and its SENDs
// wait for credit: the endpoint goes down, and the SENDs complete with its
// error.
func TestRingPeerGoneWhileSleeping(t *testing.T) {
	p := ringPair(t, transporttest.PairConfig{RecvDepth: 1, MaxMessage: 64})
	ep := p.Dialer.Endpoint
	buf := p.Dialer.Host.NewRegion(128, transport.AccessReadWrite)
	d := make(done, 2)
	ep.Post([]*transport.Op{
		p.Dialer.Host.Op(transport.OpSend, buf.Bytes()[:64], transport.RemoteAddr{}, 0, d),
		p.Dialer.Host.Op(transport.OpSend, buf.Bytes()[64:128], transport.RemoteAddr{}, 0, d),
	}, false)
	if op := d.wait(t); op.Err != nil {
		t.Fatal(op.Err)
	}
	until(t, "the reader sleeps", func() bool { return shm.RingAsleep(ep) })
	p.Acceptor.Endpoint.Close()
	select {
	case <-ep.Done():
	case <-time.After(waitFor):
		t.Fatal("the endpoint did not notice its peer went")
	}
	if op := d.wait(t); !errors.Is(op.Err, transport.ErrPeerLost) {
		t.Fatalf("send waiting for credit: %v, want the peer lost", op.Err)
	}
}

// A malformed ring entry from the peer takes the connection down with a
// protocol error; nothing crashes.
func TestRingMalformedEntry(t *testing.T) {
	p := ringPair(t, transporttest.PairConfig{})
	shm.CorruptRing(p.Dialer.Endpoint)
	ep := p.Acceptor.Endpoint
	select {
	case <-ep.Done():
	case <-time.After(waitFor):
		t.Fatal("a malformed entry left the connection up")
	}
	if err := ep.Err(); !errors.Is(err, transport.ErrProtocol) {
		t.Fatalf("endpoint error %v, want a protocol error", err)
	}
	t.Log(ep.Err())
}

// A max_message too large for a ring keeps the messages on the stream, on
// both sides, and they still arrive.
func TestRingTooLargeMaxMessage(t *testing.T) {
	p := transporttest.NewPair(t, newSHM, transporttest.PairConfig{Memfd: true, MaxMessage: 8 << 20})
	if shm.UsesRing(p.Dialer.Endpoint) || shm.UsesRing(p.Acceptor.Endpoint) {
		t.Fatal("a ring for messages of 8 MiB")
	}
	buf := p.Dialer.Host.NewRegion(4096, transport.AccessReadWrite)
	copy(buf.Bytes(), "hello")
	d := make(done, 1)
	p.Dialer.Endpoint.Post([]*transport.Op{p.Dialer.Host.Op(transport.OpSend, buf.Bytes()[:5], transport.RemoteAddr{}, 0, d)}, false)
	if op := d.wait(t); op.Err != nil {
		t.Fatal(op.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if m, err := p.Acceptor.Host.Recv(ctx); err != nil || string(m) != "hello" {
		t.Fatalf("message %q, %v", m, err)
	}
	p.Acceptor.Endpoint.Consumed(1)
}

// oldSHM stands for a peer from before message rings: its blob ends with
// the cookie, and it never sets a ring up.
type oldSHM struct{ *shm.Transport }

func (t oldSHM) LocalBlob() []byte { return t.Transport.LocalBlob()[:20] }

func (t oldSHM) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	p.Remote.Blob = p.Remote.Blob[:20]
	return t.Transport.Connect(ctx, p)
}

func (t oldSHM) Close() error { return t.Transport.Close() }

// With a peer that offers no rings, messages take the stream.
func TestRingOldPeer(t *testing.T) {
	p, err := transporttest.Connect(t, oldSHM{shm.New()}, shm.New(), transporttest.PairConfig{Memfd: true})
	if err != nil {
		t.Fatal(err)
	}
	if shm.UsesRing(p.Acceptor.Endpoint) {
		t.Fatal("a ring with a peer that offered none")
	}
	buf := p.Acceptor.Host.NewRegion(4096, transport.AccessReadWrite)
	copy(buf.Bytes(), "hello")
	d := make(done, 1)
	p.Acceptor.Endpoint.Post([]*transport.Op{p.Acceptor.Host.Op(transport.OpSend, buf.Bytes()[:5], transport.RemoteAddr{}, 0, d)}, false)
	if op := d.wait(t); op.Err != nil {
		t.Fatal(op.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if m, err := p.Dialer.Host.Recv(ctx); err != nil || string(m) != "hello" {
		t.Fatalf("message %q, %v", m, err)
	}
	p.Dialer.Endpoint.Consumed(1)
}

// TestNoDoorbellAfterClose: once an endpoint has closed, the numbers of
// its doorbells are free and other files take them; a late ring (a
// sender's, or the stream's OnDown and BeforeDown) must write into none
// of them. It did: eventfd's 8 bytes, a 64-bit 1, at the start of a file
// that had taken a doorbell's number.
func TestNoDoorbellAfterClose(t *testing.T) {
	p := ringPair(t, transporttest.PairConfig{})
	ep := p.Dialer.Endpoint
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for range 8 {
		fd, err := sys.MemfdCreate("xfer-victim", false)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "victim")
		defer f.Close()
		if err := f.Truncate(4096); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	shm.DownAfterClose(ep)
	for _, f := range files {
		var b [8]byte
		if _, err := f.ReadAt(b[:], 0); err != nil {
			t.Fatal(err)
		}
		if b != [8]byte{} {
			t.Errorf("descriptor %d, opened after the endpoint closed, was written: %x", f.Fd(), b)
		}
	}
}

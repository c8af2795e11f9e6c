package xfertest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport/transporttest"
)

// Options selects what the suite runs against.
type Options struct {
	// Policy is the transport policy of both engines.
	Policy xfer.Policy
	// Want is the transport the peers must end up on (default: Policy).
	Want string
	// Config is applied to both engines before Policy, Listen and Secret.
	Config xfer.Config
	// NoNotifyAddress says that notifications carry only the value and the
	// length, not the region and address (RDMA WRITE_WITH_IMM).
	NoNotifyAddress bool
}

// Pair is two engines and the peer the client dialed.
type Pair struct {
	Server, Client *xfer.Engine
	Peer           *xfer.Peer // client → server
	Target         *xfer.Region
}

// NewPair opens a listening server engine exporting a 4 MiB read-write
// region named "target", and a client engine dialed to it.
func NewPair(t testing.TB, o Options, secret string) *Pair {
	t.Helper()
	ctx := context.Background()
	cfg := o.Config
	cfg.Transport = o.Policy
	cfg.Listen = "127.0.0.1:0"
	cfg.Secret = secret
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 32
	}
	srv, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open server: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	target, err := srv.NewRegion(4<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatalf("target region: %v", err)
	}
	srv.Export("target", target)
	cfg.Listen = "127.0.0.1:0"
	cli, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	p, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return &Pair{Server: srv, Client: cli, Peer: p, Target: target}
}

// Run runs the conformance suite.
func Run(t *testing.T, o Options) {
	if o.Want == "" {
		o.Want = string(o.Policy)
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Options)
	}{
		{"Transport", testTransport},
		{"WriteRead", testWriteRead},
		{"WriteNotify", testWriteNotify},
		{"HandleNotify", testHandleNotify},
		{"SendRecv", testSendRecv},
		{"SendFlowControl", testSendFlowControl},
		{"SendAppend", testSendAppend},
		{"Handle", testHandle},
		{"Batch", testBatch},
		{"BadAccess", testBadAccess},
		{"NotRegistered", testNotRegistered},
		{"Deregistered", testDeregistered},
		{"Grant", testGrant},
		{"UserRegisteredMemory", testUserRegistered},
		{"Bidirectional", testBidirectional},
		{"Concurrent", testConcurrent},
		{"Cancel", testCancel},
		{"Auth", testAuth},
		{"CloseInFlight", testCloseInFlight},
		{"PeerDies", testPeerDies},
		{"Reconnect", testReconnect},
		{"DialerGone", testDialerGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, o) })
	}
}

// ctxT bounds a test: generous, because CI machines are shared and the race
// detector is slow, but a hang still fails instead of eating the CI budget.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func alloc(t testing.TB, e *xfer.Engine, n int) xfer.Buffer {
	t.Helper()
	b, err := e.Alloc(n)
	if err != nil {
		t.Fatalf("alloc %d: %v", n, err)
	}
	return b
}

func testTransport(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	if got := p.Peer.Transport(); got != o.Want {
		t.Fatalf("transport %q, want %q", got, o.Want)
	}
	if _, ok := p.Peer.Region("target"); !ok {
		t.Fatal("exported region not visible to the peer")
	}
}

func testWriteRead(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	src := alloc(t, p.Client, 2<<20)
	dst := alloc(t, p.Client, 2<<20)
	for i, n := range []int{0, 1, 7, 64, 4096, 65537, 1 << 20, 2 << 20} {
		off := uint64(i * 13)
		transporttest.Fill(src.Bytes()[:n], uint64(n))
		if err := p.Peer.Write(ctx, src.Bytes()[:n], desc.At(off)); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		if !bytes.Equal(p.Target.Bytes()[off:off+uint64(n)], src.Bytes()[:n]) {
			t.Fatalf("write %d: target memory differs", n)
		}
		clear(dst.Bytes())
		if err := p.Peer.Read(ctx, dst.Bytes()[:n], desc.At(off)); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if !bytes.Equal(dst.Bytes()[:n], src.Bytes()[:n]) {
			t.Fatalf("read %d: data differs", n)
		}
	}
	// The last byte of the region is reachable; one past it is not.
	last := desc.At(desc.Len - 1)
	if err := p.Peer.Write(ctx, src.Bytes()[:1], last); err != nil {
		t.Fatalf("write last byte: %v", err)
	}
}

func testWriteNotify(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	src := alloc(t, p.Client, 64<<10)
	for i := range 20 {
		n := 1 + i*3000
		transporttest.Fill(src.Bytes()[:n], uint64(i))
		off := uint64(i * 100)
		if err := p.Peer.WriteNotify(ctx, src.Bytes()[:n], desc.At(off), uint32(0xabc000+i)); err != nil {
			t.Fatalf("write notify: %v", err)
		}
		// Snapshot the target as soon as the notification is seen: the data
		// must already be there.
		note, err := p.Server.WaitNotify(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p.Target.Bytes()[off:off+uint64(n)], src.Bytes()[:n]) {
			t.Fatal("notification arrived before the data")
		}
		if note.Value != uint32(0xabc000+i) || note.Len != uint64(n) {
			t.Fatalf("notification %+v", note)
		}
		if !o.NoNotifyAddress && (note.Region != desc.ID || note.Addr != desc.Addr+off) {
			t.Fatalf("notification %+v does not say where the data is", note)
		}
		if note.Peer == nil {
			t.Fatal("notification without peer")
		}
	}
}

// testHandleNotify: with Peer.HandleNotify, the target's handler receives
// each notification, after its data, and Engine.WaitNotify none; a write
// the target refuses notifies nobody.
func testHandleNotify(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	desc, _ := p.Peer.Region("target")
	type seenNote struct {
		xfer.Notification
		seen []byte // the target's bytes when the notification came
	}
	notes := make(chan seenNote, 1)
	sp.HandleNotify(func(n xfer.Notification) {
		var seen []byte
		if n.Len <= uint64(len(p.Target.Bytes())) {
			seen = bytes.Clone(p.Target.Bytes()[:n.Len])
		}
		notes <- seenNote{n, seen}
	})
	src := alloc(t, p.Client, 4<<20)
	// 3 MiB + 5: more than one slice of an rdma operation (1 MiB).
	for i, n := range []int{1, 4096, 100 << 10, 256 << 10, 3<<20 + 5} {
		transporttest.Fill(src.Bytes()[:n], uint64(100+i))
		if err := p.Peer.WriteNotify(ctx, src.Bytes()[:n], desc.At(0), uint32(7+i)); err != nil {
			t.Fatalf("write notify of %d bytes: %v", n, err)
		}
		var note seenNote
		select {
		case note = <-notes:
		case <-ctx.Done():
			t.Fatalf("no notification for a write of %d bytes", n)
		}
		if note.Value != uint32(7+i) || note.Len != uint64(n) || note.Peer != sp {
			t.Fatalf("notification %+v, want value %d, len %d, from the accepted peer", note, 7+i, n)
		}
		if !bytes.Equal(note.seen, src.Bytes()[:n]) {
			t.Fatalf("write of %d bytes: the handler ran before the data was in place", n)
		}
	}
	// Out of the target region: refused, and nobody is notified.
	bad := desc.At(desc.Len - 10)
	if err := p.Peer.WriteNotify(ctx, src.Bytes()[:100], bad, 99); err == nil {
		t.Fatal("a write-notify past the region's end succeeded")
	}
	if err := p.Peer.WriteNotify(ctx, src.Bytes()[:10], desc.At(0), 100); err != nil {
		t.Fatal(err)
	}
	select {
	case note := <-notes:
		if note.Value != 100 {
			t.Fatalf("notification %+v after a refused write, want value 100", note)
		}
	case <-ctx.Done():
		t.Fatal("no notification after a refused write")
	}
	if n, ok := <-waitNotifyCh(p.Server); ok {
		t.Fatalf("Engine.WaitNotify got %+v, which went to the handler too", n)
	}
}

// waitNotifyCh returns a channel that yields the engine's next notification
// within 50 ms, or is closed without one.
func waitNotifyCh(e *xfer.Engine) <-chan xfer.Notification {
	ch := make(chan xfer.Notification, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n, err := e.WaitNotify(ctx); err == nil {
		ch <- n
	}
	close(ch)
	return ch
}

func acceptOne(t testing.TB, e *xfer.Engine) *xfer.Peer {
	t.Helper()
	sp, err := e.Accept(ctxT(t))
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return sp
}

func testSendRecv(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	max := p.Client.Config().MaxMessage
	msg := alloc(t, p.Client, max+1)
	recv := make([]byte, max)
	for i, n := range []int{0, 1, 100, 4096, max} {
		transporttest.Fill(msg.Bytes()[:n], uint64(i))
		if err := p.Peer.Send(ctx, msg.Bytes()[:n]); err != nil {
			t.Fatalf("send %d: %v", n, err)
		}
		got, err := sp.Recv(ctx, recv)
		if err != nil || got != n || !bytes.Equal(recv[:n], msg.Bytes()[:n]) {
			t.Fatalf("recv %d: got %d, %v", n, got, err)
		}
	}
	if err := p.Peer.Send(ctx, msg.Bytes()[:max+1]); !errors.Is(err, xfer.ErrTooLarge) {
		t.Fatalf("oversized send: %v, want ErrTooLarge", err)
	}
	// A buffer too small gets an error naming the size, and the message
	// waits for a bigger one.
	if err := p.Peer.Send(ctx, msg.Bytes()[:100]); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Recv(ctx, recv[:10]); !errors.Is(err, xfer.ErrTooLarge) {
		t.Fatalf("short recv buffer: %v", err)
	}
	if n, err := sp.Recv(ctx, recv); err != nil || n != 100 {
		t.Fatalf("message lost after short buffer: %d %v", n, err)
	}
	// The other direction.
	back := alloc(t, p.Server, 64)
	copy(back.Bytes(), "pong")
	if err := sp.Send(ctx, back.Bytes()[:4]); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Peer.Recv(ctx, recv); err != nil || string(recv[:n]) != "pong" {
		t.Fatalf("reply: %q %v", recv[:n], err)
	}
}

// testHandle: Peer.Handle receives the messages queued for Recv first, then
// the new ones, in order, returning credits so that many more messages than
// the receive depth get through.
func testHandle(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	msg := alloc(t, p.Client, 8)
	const early, total = 5, 1000 // more than the receive depth (128)
	send := func(i int) {
		binary.LittleEndian.PutUint64(msg.Bytes(), uint64(i))
		if err := p.Peer.Send(ctx, msg.Bytes()); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := range early {
		send(i)
	}
	// Let the early messages reach the queue Recv would read.
	deadline := time.Now().Add(5 * time.Second)
	for sp.Queued() < early && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	var mu sync.Mutex
	var got []uint64
	done := make(chan struct{})
	sp.Handle(func(m []byte) {
		mu.Lock()
		defer mu.Unlock()
		if len(m) != 8 {
			t.Errorf("message of %d bytes", len(m))
			return
		}
		got = append(got, binary.LittleEndian.Uint64(m))
		if len(got) == total {
			close(done)
		}
	})
	for i := early; i < total; i++ {
		send(i)
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("handler got %d of %d messages", len(got), total)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("message %d is %d: out of order", i, v)
		}
	}
}

func testSendFlowControl(t *testing.T, o Options) {
	o.Config.RecvDepth = 8
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	const total = 500
	msg := alloc(t, p.Client, 8*total)
	errc := make(chan error, 1)
	go func() {
		for i := range total {
			b := msg.Bytes()[i*8 : i*8+8]
			binary.LittleEndian.PutUint64(b, uint64(i))
			if err := p.Peer.Send(ctx, b); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	buf := make([]byte, 8)
	for i := range total {
		if i%50 == 0 {
			time.Sleep(2 * time.Millisecond) // a slow consumer: senders must wait, not overflow
		}
		n, err := sp.Recv(ctx, buf)
		if err != nil || n != 8 || binary.LittleEndian.Uint64(buf) != uint64(i) {
			t.Fatalf("message %d: n=%d err=%v got %d (out of order or lost)", i, n, err, binary.LittleEndian.Uint64(buf))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// testSendAppend: Peer.TrySendAppend encodes messages straight into the
// send queue on tcp, shm and rdma, reports false without calling fill
// where it cannot (the test-only twin transport; no credit left at the
// peer), keeps the order of the
// messages sent either way, and refuses a fill longer than its bound with
// nothing sent.
func testSendAppend(t *testing.T, o Options) {
	o.Config.RecvDepth = 8
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	fast := o.Want != "twin" // the only transport without transport.Appender
	msg := alloc(t, p.Client, 8)
	var seq uint64
	calls := 0
	fill := func(b []byte) []byte {
		calls++
		return binary.LittleEndian.AppendUint64(b, seq)
	}
	// send sends message seq, through the queue if it takes it, and
	// reports whether it did.
	send := func() bool {
		before := calls
		ok, err := p.Peer.TrySendAppend(8, fill)
		if err != nil {
			t.Fatalf("TrySendAppend %d: %v", seq, err)
		}
		if !ok && calls != before {
			t.Fatalf("TrySendAppend %d reported false after calling fill", seq)
		}
		if !ok {
			binary.LittleEndian.PutUint64(msg.Bytes(), seq)
			if err := p.Peer.Send(ctx, msg.Bytes()); err != nil {
				t.Fatalf("send %d: %v", seq, err)
			}
		}
		seq++
		return ok
	}
	// With nobody receiving, the peer's 8 credits run out: past them the
	// queue must refuse (the message would overflow the peer).
	appended := 0
	for range 8 {
		if send() {
			appended++
		}
	}
	if ok, err := p.Peer.TrySendAppend(8, fill); ok || err != nil {
		t.Fatalf("TrySendAppend with no credit left: %v, %v; want false", ok, err)
	}
	if fast && appended != 8 {
		t.Fatalf("%s: %d of 8 messages went through the send queue, want all", o.Want, appended)
	}
	if !fast && (appended != 0 || calls != 0) {
		t.Fatalf("%s: TrySendAppend took %d messages (fill called %d times), want none", o.Want, appended, calls)
	}
	// The rest interleave both paths as credits come and go.
	const total = 400
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		for i := range total {
			n, err := sp.Recv(ctx, buf)
			if err == nil && (n != 8 || binary.LittleEndian.Uint64(buf) != uint64(i)) {
				err = fmt.Errorf("message %d: %d bytes holding %d (out of order or lost)", i, n, binary.LittleEndian.Uint64(buf))
			}
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for seq < total-1 {
		send()
	}
	if fast {
		// A fill longer than its bound: refused, nothing sent, the
		// connection up.
		transporttest.RefusesLongFill(t, "TrySendAppend", p.Peer.TrySendAppend)
	}
	send()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func testBatch(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	const n = 64
	src := alloc(t, p.Client, n*4096)
	dst := alloc(t, p.Client, n*4096)
	transporttest.Fill(src.Bytes(), 7)
	ops := make([]xfer.Op, n)
	for i := range ops {
		ops[i] = xfer.Op{Kind: xfer.OpWrite, Local: src.Bytes()[i*4096 : (i+1)*4096], Remote: desc.At(uint64(i * 4096))}
	}
	bad := desc.At(0)
	bad.Key++
	ops[17].Remote = bad
	b := p.Peer.Submit(ops)
	err := b.Wait(ctx)
	if !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Fatalf("batch error %v, want the bad op's remote access error", err)
	}
	if !b.Done() {
		t.Fatal("Done false after Wait")
	}
	for i := range ops {
		want := i == 17
		if (ops[i].Err != nil) != want {
			t.Fatalf("op %d: err %v", i, ops[i].Err)
		}
		if !want && !bytes.Equal(p.Target.Bytes()[i*4096:(i+1)*4096], ops[i].Local) {
			t.Fatalf("op %d: data not in place", i)
		}
	}
	for i := range ops {
		ops[i] = xfer.Op{Kind: xfer.OpRead, Local: dst.Bytes()[i*4096 : (i+1)*4096], Remote: desc.At(uint64(i * 4096))}
	}
	b = p.Peer.Submit(ops)
	for !b.Done() {
		time.Sleep(10 * time.Microsecond) // polling is part of the contract
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), p.Target.Bytes()[:n*4096]) {
		t.Fatal("batch read differs")
	}
	if err := p.Peer.Submit(nil).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// expectRefused runs op and checks that it fails with ErrRemoteAccess and
// leaves the target untouched.
func expectRefused(t *testing.T, p *Pair, name string, op func() error) {
	t.Helper()
	before := bytes.Clone(p.Target.Bytes())
	err := op()
	if !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Fatalf("%s: %v, want ErrRemoteAccess", name, err)
	}
	if !bytes.Equal(before, p.Target.Bytes()) {
		t.Fatalf("%s: target memory changed", name)
	}
}

func testBadAccess(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	transporttest.Fill(p.Target.Bytes(), 99)
	src := alloc(t, p.Client, 8192)
	transporttest.Fill(src.Bytes(), 1)
	buf := src.Bytes()[:4096]
	wrongKey := desc.At(0)
	wrongKey.Key ^= 1
	unknown := desc.At(0)
	unknown.Region += 1000
	cases := map[string]xfer.RemoteAddr{
		"wrong key":      wrongKey,
		"unknown region": unknown,
		"past the end":   desc.At(desc.Len - 100),
		"before start":   {Region: desc.ID, Addr: desc.Addr - 4096, Key: desc.Key},
		"wrapping":       {Region: desc.ID, Addr: ^uint64(0) - 10, Key: desc.Key},
	}
	for name, ra := range cases {
		expectRefused(t, p, "write "+name, func() error { return p.Peer.Write(ctx, buf, ra) })
		expectRefused(t, p, "notify "+name, func() error { return p.Peer.WriteNotify(ctx, buf, ra, 1) })
		expectRefused(t, p, "read "+name, func() error { return p.Peer.Read(ctx, buf, ra) })
	}
	var ae interface{ Error() string }
	err := p.Peer.Write(ctx, buf, wrongKey)
	if !errors.As(err, &ae) || !bytes.Contains([]byte(err.Error()), []byte("wrong key")) {
		t.Fatalf("wrong-key error does not say so: %v", err)
	}
	// Rights.
	ro, err := p.Server.NewRegion(1<<20, xfer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	wo, err := p.Server.NewRegion(1<<20, xfer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Fill(ro.Bytes(), 5)
	roBefore := bytes.Clone(ro.Bytes())
	if err := p.Peer.Write(ctx, buf, ro.Desc().At(0)); !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Fatalf("write to read-only region: %v", err)
	}
	if !bytes.Equal(roBefore, ro.Bytes()) {
		t.Fatal("read-only region changed")
	}
	if err := p.Peer.Read(ctx, buf, ro.Desc().At(0)); err != nil {
		t.Fatalf("read of read-only region: %v", err)
	}
	if err := p.Peer.Read(ctx, buf, wo.Desc().At(0)); !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Fatalf("read of write-only region: %v", err)
	}
	if err := p.Peer.Write(ctx, buf, wo.Desc().At(0)); err != nil {
		t.Fatalf("write to write-only region: %v", err)
	}
	// The connection still works after all of that.
	if err := p.Peer.Write(ctx, buf, desc.At(0)); err != nil {
		t.Fatalf("peer unusable after refusals: %v", err)
	}
}

func testNotRegistered(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	heap := make([]byte, 64)
	if err := p.Peer.Write(ctx, heap, desc.At(0)); !errors.Is(err, xfer.ErrNotRegistered) {
		t.Fatalf("write from heap memory: %v", err)
	}
	if err := p.Peer.Read(ctx, heap, desc.At(0)); !errors.Is(err, xfer.ErrNotRegistered) {
		t.Fatalf("read into heap memory: %v", err)
	}
	ops := []xfer.Op{{Kind: xfer.OpWrite, Local: heap, Remote: desc.At(0)}}
	if err := p.Peer.Submit(ops).Wait(ctx); !errors.Is(err, xfer.ErrNotRegistered) {
		t.Fatalf("batch from heap memory: %v", err)
	}
}

func testDeregistered(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	r, err := p.Server.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	d := r.Desc()
	buf := alloc(t, p.Client, 4096)
	if err := p.Peer.Write(ctx, buf.Bytes(), d.At(0)); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	// The revoke travels asynchronously; within a short time every access
	// must be refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.Peer.Write(ctx, buf.Bytes(), d.At(0))
		if errors.Is(err, xfer.ErrRemoteAccess) {
			break
		}
		if errors.Is(err, net.ErrClosed) {
			// iWARP refuses a stale rkey by terminating the connection;
			// the next write dials again and is refused cleanly.
			continue
		}
		if err != nil {
			t.Fatalf("write to deregistered region: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("deregistered region still writable")
		}
		time.Sleep(time.Millisecond)
	}
}

// A grant confines a peer to its bytes and rights: an access outside it
// with its key is refused and touches nothing, a read-only grant of a
// read-write region refuses writes, and once closed it refuses everything,
// while the region itself still works.
func testGrant(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	const size = 64 << 10
	r, err := p.Server.NewRegion(size, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	transporttest.Fill(r.Bytes(), 7)
	g, err := r.Grant(16<<10, 8<<10, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := r.Grant(32<<10, 4096, xfer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	d, rd := g.Desc(), r.Desc()
	if d.Addr != rd.Addr+16<<10 || d.Len != 8<<10 || d.ID == rd.ID || d.Key == rd.Key || d.Access != xfer.AccessReadWrite {
		t.Fatalf("grant's descriptor %+v of region %+v: want its own ID and key, 8 KiB at 16 KiB", d, rd)
	}
	src := alloc(t, p.Client, 8192)
	transporttest.Fill(src.Bytes(), 8)
	buf := src.Bytes()[:4096]
	if err := p.Peer.Write(ctx, buf, d.At(4096)); err != nil {
		t.Fatalf("write inside the grant: %v", err)
	}
	if !bytes.Equal(r.Bytes()[20<<10:24<<10], buf) {
		t.Fatal("the write inside the grant did not land in the region")
	}
	dst := alloc(t, p.Client, 4096)
	if err := p.Peer.Read(ctx, dst.Bytes(), ro.Desc().At(0)); err != nil || !bytes.Equal(dst.Bytes(), r.Bytes()[32<<10:36<<10]) {
		t.Fatalf("read of the read-only grant: %v", err)
	}

	refused := func(what string, op func() error) {
		t.Helper()
		before := bytes.Clone(r.Bytes())
		var err error
		for range 10 {
			// iWARP refuses a stale rkey by terminating the connection;
			// the next try dials again and is refused cleanly.
			if err = op(); !errors.Is(err, net.ErrClosed) {
				break
			}
		}
		if !errors.Is(err, xfer.ErrRemoteAccess) {
			t.Fatalf("%s: %v, want ErrRemoteAccess", what, err)
		}
		if !bytes.Equal(before, r.Bytes()) {
			t.Fatalf("%s: the region changed", what)
		}
	}
	outside := map[string]xfer.RemoteAddr{
		"across the grant's end": d.At(8<<10 - 2048),
		"before the grant":       {Region: d.ID, Addr: d.Addr - 4096, Key: d.Key},
		"at the region's base":   {Region: d.ID, Addr: rd.Addr, Key: d.Key},
		"the region's key":       {Region: d.ID, Addr: d.Addr, Key: rd.Key},
	}
	for what, ra := range outside {
		refused("write "+what, func() error { return p.Peer.Write(ctx, buf, ra) })
		refused("read "+what, func() error { return p.Peer.Read(ctx, buf, ra) })
	}
	refused("write to the read-only grant", func() error { return p.Peer.Write(ctx, buf, ro.Desc().At(0)) })

	// Closed, the grant refuses everything (the revoke travels
	// asynchronously: within a short time); the region still works.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := p.Peer.Write(ctx, buf, d.At(0))
		if errors.Is(err, xfer.ErrRemoteAccess) {
			break
		}
		if err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write to a closed grant: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed grant is still writable")
		}
		time.Sleep(time.Millisecond)
	}
	if err := p.Peer.Write(ctx, buf, rd.At(0)); err != nil {
		t.Fatalf("write to the region after its grant closed: %v", err)
	}

	// Bad grants are refused; closing the region closes its grants.
	for what, f := range map[string]func() (*xfer.Region, error){
		"past the end": func() (*xfer.Region, error) { return r.Grant(size-4096, 8192, xfer.AccessRead) },
		"empty":        func() (*xfer.Region, error) { return r.Grant(0, 0, xfer.AccessRead) },
		"no rights":    func() (*xfer.Region, error) { return r.Grant(0, 4096, 0) },
		"more rights":  func() (*xfer.Region, error) { return ro.Grant(0, 4096, xfer.AccessRead) },
		"write of a read": func() (*xfer.Region, error) {
			return mustRegion(t, p.Server, xfer.AccessRead).Grant(0, 4096, xfer.AccessWrite)
		},
		"of a closed grant": func() (*xfer.Region, error) { return g.Grant(0, 4096, xfer.AccessRead) },
	} {
		if x, err := f(); err == nil {
			x.Close()
			t.Errorf("grant %s: accepted", what)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	refused("read of a grant of a closed region", func() error { return p.Peer.Read(ctx, dst.Bytes(), ro.Desc().At(0)) })
	if _, err := r.Grant(0, 4096, xfer.AccessRead); !errors.Is(err, xfer.ErrClosed) {
		t.Errorf("grant of a closed region: %v, want ErrClosed", err)
	}
}

// mustRegion registers a new region of 64 KiB with access, closed when the
// test ends.
func mustRegion(t *testing.T, e *xfer.Engine, access xfer.Access) *xfer.Region {
	t.Helper()
	r, err := e.NewRegion(64<<10, access)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func testUserRegistered(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	// Memory the user mapped themselves (no memfd: shm serves it over the
	// stream path).
	user, err := sys.MmapAnon(1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Munmap(user) })
	ur, err := p.Server.Register(user, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	src := alloc(t, p.Client, 64<<10)
	transporttest.Fill(src.Bytes(), 3)
	if err := p.Peer.Write(ctx, src.Bytes(), ur.Desc().At(100)); err != nil {
		t.Fatalf("write to user-registered memory: %v", err)
	}
	if !bytes.Equal(user[100:100+64<<10], src.Bytes()) {
		t.Fatal("user memory differs")
	}
	dst := alloc(t, p.Client, 64<<10)
	if err := p.Peer.Read(ctx, dst.Bytes(), ur.Desc().At(100)); err != nil || !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatalf("read from user-registered memory: %v", err)
	}
	// Overlapping registrations are refused.
	if _, err := p.Server.Register(user[4096:8192], xfer.AccessRead); err == nil {
		t.Fatal("overlapping registration accepted")
	}
	if err := ur.Close(); err != nil {
		t.Fatal(err)
	}
	if user[100] != src.Bytes()[0] {
		t.Fatal("deregistering touched the user's memory")
	}
}

func testBidirectional(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	sp := acceptOne(t, p.Server)
	// The client tells the server where to write, the KV way: a descriptor
	// of a client buffer, sent as a message.
	land := alloc(t, p.Client, 1<<20)
	desc := land.Desc()
	db, _ := desc.MarshalBinary()
	msg := alloc(t, p.Client, len(db))
	copy(msg.Bytes(), db)
	if err := p.Peer.Send(ctx, msg.Bytes()); err != nil {
		t.Fatal(err)
	}
	rb := make([]byte, 128)
	n, err := sp.Recv(ctx, rb)
	if err != nil {
		t.Fatal(err)
	}
	var got xfer.RegionDesc
	if err := got.UnmarshalBinary(rb[:n]); err != nil {
		t.Fatal(err)
	}
	if got.Owner != p.Client.ID() {
		t.Fatal("descriptor owner is not the client")
	}
	val := alloc(t, p.Server, 1<<20)
	transporttest.Fill(val.Bytes(), 11)
	if err := sp.Write(ctx, val.Bytes(), got.At(0)); err != nil {
		t.Fatalf("server writes into the client's buffer: %v", err)
	}
	if !bytes.Equal(land.Bytes(), val.Bytes()) {
		t.Fatal("client buffer differs")
	}
}

func testConcurrent(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	const workers = 8
	slot := desc.Len / workers
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, err := p.Client.Alloc(int(slot))
			if err != nil {
				errs <- err
				return
			}
			dst, err := p.Client.Alloc(int(slot))
			if err != nil {
				errs <- err
				return
			}
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 100 {
				n := 1 + r.IntN(int(slot))
				off := uint64(w) * slot
				transporttest.Fill(src.Bytes()[:n], uint64(w*1000+i))
				if err := p.Peer.Write(ctx, src.Bytes()[:n], desc.At(off)); err != nil {
					errs <- err
					return
				}
				if err := p.Peer.Read(ctx, dst.Bytes()[:n], desc.At(off)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(src.Bytes()[:n], dst.Bytes()[:n]) {
					errs <- fmt.Errorf("worker %d op %d: data differs", w, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testCancel(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	desc, _ := p.Peer.Region("target")
	buf := alloc(t, p.Client, 4096)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Peer.Read(ctx, buf.Bytes(), desc.At(0))
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0)); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("expired write: %v", err)
	}
	// Recv honours its context.
	sp := acceptOne(t, p.Server)
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer rcancel()
	if _, err := sp.Recv(rctx, make([]byte, 8)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("recv with deadline: %v", err)
	}
	if _, err := p.Server.WaitNotify(rctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait notify with deadline: %v", err)
	}
	// The peer is still fine.
	if err := p.Peer.Write(context.Background(), buf.Bytes(), desc.At(0)); err != nil {
		t.Fatal(err)
	}
}

func testAuth(t *testing.T, o Options) {
	ctx := ctxT(t)
	p := NewPair(t, o, "s3cret-s3cret-s3cret")
	desc, _ := p.Peer.Region("target")
	buf := alloc(t, p.Client, 64)
	if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("authenticated peer: %v", err)
	}
	try := func(secret string) error {
		cfg := o.Config
		cfg.Transport, cfg.Secret = o.Policy, secret
		e, err := xfer.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		_, err = e.Dial(ctx, p.Server.Addr())
		return err
	}
	if err := try(""); !errors.Is(err, xfer.ErrAuth) {
		t.Fatalf("dial without secret: %v, want ErrAuth", err)
	}
	if err := try("wrong-wrong-wrong-wrong"); !errors.Is(err, xfer.ErrAuth) {
		t.Fatalf("dial with wrong secret: %v, want ErrAuth", err)
	}
	// A client with a secret refuses a server that cannot prove it.
	open := NewPair(t, o, "")
	cfg := o.Config
	cfg.Transport, cfg.Secret = o.Policy, "s3cret-s3cret-s3cret"
	e, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Dial(ctx, open.Server.Addr()); !errors.Is(err, xfer.ErrAuth) {
		t.Fatalf("dial of an unauthenticated server: %v, want ErrAuth", err)
	}
	// The server kept serving its authenticated peer.
	if err := p.Peer.Read(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("authenticated peer after refusals: %v", err)
	}
}

func testCloseInFlight(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	sp := acceptOne(t, p.Server)
	// A Recv blocked on a peer that gets closed returns ErrClosed.
	recvErr := make(chan error, 1)
	go func() {
		_, err := sp.Recv(ctx, make([]byte, 8))
		recvErr <- err
	}()
	buf := alloc(t, p.Client, 1<<20)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.Client.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("in-flight op after Close: %v, want net.ErrClosed", err)
		}
	}
	if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("op after Close: %v", err)
	}
	if _, err := p.Client.Dial(ctx, p.Server.Addr()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("dial after Close: %v", err)
	}
	if err := p.Client.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	select {
	case err := <-recvErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("recv on a closed peer: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("recv did not return after the peer closed")
	}
}

func testPeerDies(t *testing.T, o Options) {
	p := NewPair(t, o, "")
	ctx := ctxT(t)
	desc, _ := p.Peer.Region("target")
	buf := alloc(t, p.Client, 1<<20)
	done := make(chan error, 1)
	go func() {
		for {
			if err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	p.Server.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) && !errors.Is(err, xfer.ErrPeerLost) {
			// A reconnect attempt to a dead engine fails to dial.
			var oe *net.OpError
			if !errors.As(err, &oe) {
				t.Fatalf("write to a dead peer: %v", err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write to a dead peer hung")
	}
}

// When a dialer goes away, the acceptor notices, releases the connection
// (Peers no longer lists it) and fails its operations with ErrPeerLost.
func testDialerGone(t *testing.T, o Options) {
	ctx := ctxT(t)
	p, _, _ := wrotePair(t, o)
	sp := acceptOne(t, p.Server)
	if n := len(p.Server.Peers()); n != 1 {
		t.Fatalf("server lists %d peers, want 1", n)
	}
	p.Client.Close()
	select {
	case <-sp.Down():
	case <-ctx.Done():
		t.Fatal("the server did not notice its dialer go away")
	}
	for len(p.Server.Peers()) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the server keeps the peer of a dialer that went away")
		}
		time.Sleep(time.Millisecond)
	}
	sbuf := alloc(t, p.Server, 64)
	if err := sp.Write(ctx, sbuf.Bytes(), p.Target.Desc().At(0)); !errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("write to a dialer that went away: %v, want ErrPeerLost", err)
	}
}

// wrotePair is a pair whose client has written 64 bytes to the target: its
// connection is up on both sides.
func wrotePair(t *testing.T, o Options) (*Pair, xfer.RegionDesc, xfer.Buffer) {
	t.Helper()
	p := NewPair(t, o, "")
	desc, _ := p.Peer.Region("target")
	buf := alloc(t, p.Client, 64)
	if err := p.Peer.Write(ctxT(t), buf.Bytes(), desc.At(0)); err != nil {
		t.Fatal(err)
	}
	return p, desc, buf
}

func testReconnect(t *testing.T, o Options) {
	ctx := ctxT(t)
	p, desc, buf := wrotePair(t, o)
	// The server drops its side; the client's next operation dials again.
	sp := acceptOne(t, p.Server)
	sp.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.Peer.Write(ctx, buf.Bytes(), desc.At(0))
		if err == nil {
			break
		}
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after the server dropped the peer: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("peer did not reconnect")
		}
	}
	if p.Peer.Transport() != o.Want {
		t.Fatalf("reconnected on %s", p.Peer.Transport())
	}
}

package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Options selects what Run tests.
type Options struct {
	// New makes the transport under test, once per side of each pair.
	New Factory
	// Name is what Endpoint.Transport must report (default: the
	// transport's Name).
	Name string
	// Config is the base of every pair's configuration (Conns, Memfd,
	// PollSpin, Logger); subtests that need a small MaxMessage or
	// RecvDepth set their own.
	Config PairConfig
	// NoNotifyAddress says that notifications carry only the value and
	// the length, not the region and address (rdma's WRITE_WITH_IMM).
	NoNotifyAddress bool
	// StaleAccessFails says that an operation that races a revocation may
	// take the endpoint down (rdma: it uses the stale rkey, the NIC
	// refuses it and the QP enters the error state); the endpoint's
	// operations then fail with its error. Elsewhere a refused access
	// leaves the endpoint up.
	StaleAccessFails bool
}

// Run runs the transport conformance suite: every subtest builds pairs of
// endpoints with NewPair and checks the contract of package transport.
func Run(t *testing.T, o Options) {
	if o.New == nil {
		t.Fatal("transporttest.Run: Options.New is nil")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Options)
	}{
		{"Transport", testTransport},
		{"WriteRead", testWriteRead},
		{"WriteNotify", testWriteNotify},
		{"Batch", testBatch},
		{"Concurrent", testConcurrent},
		{"SendOrder", testSendOrder},
		{"SendMaxMessage", testSendMaxMessage},
		{"SendCredits", testSendCredits},
		{"BadAccess", testBadAccess},
		{"BadAccessLarge", testBadAccessLarge},
		{"Revoke", testRevoke},
		{"Cancel", testCancel},
		{"UnknownKind", testUnknownKind},
		{"PostWait", testPostWait},
		{"Close", testClose},
		{"Appender", testAppender},
		{"Counter", testCounter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, o) })
	}
}

// timeout bounds every wait of the suite: generous, for shared machines,
// the race detector and VMs, but a hang still fails.
const timeout = 2 * time.Minute

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

func (o Options) pair(t testing.TB, tweak func(*PairConfig)) *Pair {
	t.Helper()
	c := o.Config
	if tweak != nil {
		tweak(&c)
	}
	return NewPair(t, o.New, c)
}

// Fill writes a pseudo-random pattern derived from seed into b, eight bytes
// per step (the race detector makes byte-at-a-time loops slow): the same
// seed gives the same bytes, so a test can check what arrived. The
// end-to-end suite (xfertest) uses it too.
func Fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for ; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

// RefusesLongFill checks that appendSend (an endpoint's AppendSend, or an
// engine peer's TrySendAppend) refuses a fill that writes more than its
// bound of 8 bytes: an error, never true. While it reports false (no credit
// left) it is tried again, for up to the suite's timeout. That nothing of
// the long fill arrived is for the caller to check, by what arrives next.
func RefusesLongFill(tb testing.TB, name string, appendSend func(max int, fill func(b []byte) []byte) (bool, error)) {
	tb.Helper()
	long := func(b []byte) []byte { return append(b, make([]byte, 9)...) }
	deadline := time.Now().Add(timeout)
	for {
		ok, err := appendSend(8, long)
		if err != nil {
			if ok {
				tb.Fatalf("%s reported both success and an error", name)
			}
			return
		}
		if ok {
			tb.Fatalf("%s sent a message longer than its bound", name)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: no credit came back in %v", name, timeout)
		}
		time.Sleep(time.Millisecond) // no credit back yet
	}
}

// tracker is the Completer of the suite's operations: it counts every
// OpDone, so that a second completion of one operation is caught.
type tracker struct {
	mu     sync.Mutex
	count  map[*transport.Op]int
	extra  []string
	signal chan struct{}
}

func newTracker() *tracker {
	return &tracker{count: map[*transport.Op]int{}, signal: make(chan struct{}, 1)}
}

func (c *tracker) OpDone(op *transport.Op) {
	c.mu.Lock()
	c.count[op]++
	if c.count[op] == 2 {
		c.extra = append(c.extra, fmt.Sprintf("%s of %d bytes to region %d at %#x (err %v)", op.Kind, len(op.Local), op.Remote.Region, op.Remote.Addr, op.Err))
	}
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// times reports how often op completed.
func (c *tracker) times(op *transport.Op) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[op]
}

// wait waits until every op completed, and fails the test if one did not
// within the suite's timeout or one completed twice.
func (c *tracker) wait(t testing.TB, ops ...*transport.Op) {
	t.Helper()
	if err := c.await(ops...); err != nil {
		t.Fatal(err)
	}
}

// await is wait for goroutines other than the test's: it returns what
// wait fails the test with.
func (c *tracker) await(ops ...*transport.Op) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		left := 0
		for _, op := range ops {
			if c.count[op] == 0 {
				left++
			}
		}
		extra := c.extra
		c.mu.Unlock()
		if len(extra) > 0 {
			return fmt.Errorf("operations completed more than once: %v", extra)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-c.signal:
		case <-time.After(10 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("%d of %d operations never completed", left, len(ops))
		}
	}
}

// check fails the test if an operation completed more than once.
func (c *tracker) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.extra) > 0 {
		t.Fatalf("operations completed more than once: %v", c.extra)
	}
}

// do posts one operation and waits for it.
func do(t testing.TB, s *Side, kind transport.OpKind, local []byte, remote transport.RemoteAddr, imm uint32) error {
	t.Helper()
	c := newTracker()
	op := s.Host.Op(kind, local, remote, imm, c)
	s.Endpoint.Post([]*transport.Op{op}, false)
	c.wait(t, op)
	return op.Err
}

// recv takes the next message s's host received and returns its credit.
func recv(t testing.TB, s *Side) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := s.Host.Recv(ctx)
	if err != nil {
		t.Fatalf("no message: %v", err)
	}
	s.Endpoint.Consumed(1)
	return m
}

func mustUp(t testing.TB, s *Side) {
	t.Helper()
	select {
	case <-s.Endpoint.Done():
		t.Fatalf("endpoint went down: %v", s.Endpoint.Err())
	default:
	}
	if err := s.Endpoint.Err(); err != nil {
		t.Fatalf("endpoint up, but Err is %v", err)
	}
}

func testTransport(t *testing.T, o Options) {
	p := o.pair(t, nil)
	for _, s := range []*Side{p.Dialer, p.Acceptor} {
		want := o.Name
		if want == "" {
			want = s.Transport.Name()
		}
		if got := s.Endpoint.Transport(); got != want {
			t.Errorf("Transport() = %q, want %q", got, want)
		}
		// What the suite moves is host memory, and a transport says who
		// keeps a peer to a region's rights.
		c := s.Transport.Caps()
		if !c.Memory.Has(mem.KindHost) {
			t.Errorf("Caps().Memory = %v: no host memory", c.Memory)
		}
		if c.Rights.String() == "unknown" {
			t.Errorf("Caps().Rights = %d: not one of the Rights", c.Rights)
		}
		if c != p.Acceptor.Transport.Caps() {
			t.Errorf("the two sides' Caps differ: %+v and %+v", c, p.Acceptor.Transport.Caps())
		}
		mustUp(t, s)
	}
}

// sizes of the integrity checks: around the page size, the stream
// transports' small-operation and by-reference thresholds (64 KiB), the
// rdma slice (1 MiB), and several MiB.
var sizes = []int{1, 2, 63, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, 1<<20 + 1, 3<<20 + 5, 4 << 20}

// guard is how many bytes around each transfer are checked to be left
// alone.
const guard = 4096

func testWriteRead(t *testing.T, o Options) {
	p := o.pair(t, nil)
	for _, dir := range []struct {
		name     string
		from, to *Side
	}{{"DialerToAcceptor", p.Dialer, p.Acceptor}, {"AcceptorToDialer", p.Acceptor, p.Dialer}} {
		t.Run(dir.name, func(t *testing.T) {
			src := dir.from.Host.NewRegion(8<<20+guard, transport.AccessReadWrite)
			dst := dir.to.Host.NewRegion(8<<20+guard, transport.AccessReadWrite)
			Fill(dst.Bytes(), 1)
			for i, n := range sizes {
				off := guard + i*13
				d := dst.Bytes()
				before := append([]byte(nil), d[off-guard:off]...)
				after := append([]byte(nil), d[off+n:off+n+guard]...)
				out := src.Bytes()[:n]
				Fill(out, uint64(100+i))
				if err := do(t, dir.from, transport.OpWrite, out, dst.At(uint64(off)), 0); err != nil {
					t.Fatalf("write of %d bytes: %v", n, err)
				}
				if !bytes.Equal(d[off:off+n], out) {
					t.Fatalf("write of %d bytes: target differs from source", n)
				}
				if !bytes.Equal(d[off-guard:off], before) || !bytes.Equal(d[off+n:off+n+guard], after) {
					t.Fatalf("write of %d bytes at %d touched bytes around it", n, off)
				}
				in := src.Bytes()[4<<20 : 4<<20+n]
				clear(in)
				if err := do(t, dir.from, transport.OpRead, in, dst.At(uint64(off)), 0); err != nil {
					t.Fatalf("read of %d bytes: %v", n, err)
				}
				if !bytes.Equal(in, out) {
					t.Fatalf("read of %d bytes: data differs from what was written", n)
				}
			}
			mustUp(t, dir.from)
			mustUp(t, dir.to)
		})
	}
}

func testWriteNotify(t *testing.T, o Options) {
	p := o.pair(t, nil)
	ctx := ctxT(t)
	src := p.Dialer.Host.NewRegion(4<<20, transport.AccessReadWrite)
	dst := p.Acceptor.Host.NewRegion(8<<20, transport.AccessReadWrite)
	// The notification must find its data in place: the host checks on
	// the receive path, when the transport calls Notify.
	var mu sync.Mutex
	var want []byte
	var wantOff int
	var early []string
	p.Acceptor.Host.OnNotify(func(n transport.Notification) {
		mu.Lock()
		defer mu.Unlock()
		if want != nil && !bytes.Equal(dst.Bytes()[wantOff:wantOff+len(want)], want) {
			early = append(early, fmt.Sprintf("notification %#x of %d bytes before its data was in place", n.Value, len(want)))
		}
	})
	for i, n := range []int{1, 4096, 65536, 1<<20 + 3, 3 << 20} {
		off := 8 + i*4096
		out := src.Bytes()[:n]
		Fill(out, uint64(200+i))
		mu.Lock()
		want, wantOff = out, off
		mu.Unlock()
		value := uint32(0xa0000000 + i)
		if err := do(t, p.Dialer, transport.OpWriteImm, out, dst.At(uint64(off)), value); err != nil {
			t.Fatalf("write-with-notify of %d bytes: %v", n, err)
		}
		// A plain write in between notifies nobody.
		if err := do(t, p.Dialer, transport.OpWrite, src.Bytes()[:64], dst.At(6<<20), 0); err != nil {
			t.Fatal(err)
		}
		note, err := p.Acceptor.Host.WaitNotify(ctx)
		if err != nil {
			t.Fatalf("write-with-notify of %d bytes: no notification: %v", n, err)
		}
		if note.Value != value || note.Len != uint64(n) {
			t.Fatalf("notification %+v, want value %#x and length %d", note, value, n)
		}
		if !o.NoNotifyAddress && (note.Region != dst.ID() || note.Addr != dst.Base()+uint64(off)) {
			t.Fatalf("notification %+v, want region %d at %#x", note, dst.ID(), dst.Base()+uint64(off))
		}
		if !bytes.Equal(dst.Bytes()[off:off+n], out) {
			t.Fatalf("write-with-notify of %d bytes: target differs from source", n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatal(early)
	}
	if k := p.Acceptor.Host.Notifications(); k != 0 {
		t.Fatalf("%d notifications more than write-with-notify operations", k)
	}
}

func testBatch(t *testing.T, o Options) {
	p := o.pair(t, nil)
	src := p.Dialer.Host.NewRegion(8<<20, transport.AccessReadWrite)
	dst := p.Acceptor.Host.NewRegion(8<<20, transport.AccessReadWrite)
	Fill(src.Bytes(), 7)
	Fill(dst.Bytes()[4<<20:], 8) // what the batch reads
	c := newTracker()
	type span struct{ off, n int }
	var writes, reads []span
	var ops []*transport.Op
	woff, roff := 0, 0
	for i := range 256 {
		n := 1 + (i*997)%16384
		if i%32 == 5 {
			n = 256 << 10
		}
		if i%4 == 3 {
			// READs of the pre-filled half, in the same Post as the WRITEs.
			reads = append(reads, span{roff, n})
			ops = append(ops, p.Dialer.Host.Op(transport.OpRead, src.Bytes()[4<<20+roff:4<<20+roff+n], dst.At(uint64(4<<20+roff)), 0, c))
			roff += n + 3
			continue
		}
		writes = append(writes, span{woff, n})
		ops = append(ops, p.Dialer.Host.Op(transport.OpWrite, src.Bytes()[woff:woff+n], dst.At(uint64(woff)), 0, c))
		woff += n + 5
	}
	if woff > 4<<20 || roff > 4<<20 {
		t.Fatalf("batch spans %d and %d bytes: more than the regions' halves", woff, roff)
	}
	p.Dialer.Endpoint.Post(ops, false)
	c.wait(t, ops...)
	for i, op := range ops {
		if op.Err != nil {
			t.Fatalf("op %d (%s of %d bytes): %v", i, op.Kind, len(op.Local), op.Err)
		}
	}
	for _, w := range writes {
		if !bytes.Equal(dst.Bytes()[w.off:w.off+w.n], src.Bytes()[w.off:w.off+w.n]) {
			t.Fatalf("batched write of %d bytes at %d: target differs", w.n, w.off)
		}
	}
	for _, r := range reads {
		if !bytes.Equal(src.Bytes()[4<<20+r.off:4<<20+r.off+r.n], dst.Bytes()[4<<20+r.off:4<<20+r.off+r.n]) {
			t.Fatalf("batched read of %d bytes at %d: data differs", r.n, r.off)
		}
	}
	// Read every written span back, in one Post, into a cleared copy.
	back := p.Dialer.Host.NewRegion(4<<20, transport.AccessReadWrite)
	c2 := newTracker()
	ops = ops[:0]
	for _, w := range writes {
		ops = append(ops, p.Dialer.Host.Op(transport.OpRead, back.Bytes()[w.off:w.off+w.n], dst.At(uint64(w.off)), 0, c2))
	}
	p.Dialer.Endpoint.Post(ops, false)
	c2.wait(t, ops...)
	for i, w := range writes {
		if ops[i].Err != nil {
			t.Fatalf("read back %d: %v", i, ops[i].Err)
		}
		if !bytes.Equal(back.Bytes()[w.off:w.off+w.n], src.Bytes()[w.off:w.off+w.n]) {
			t.Fatalf("read back of %d bytes at %d differs", w.n, w.off)
		}
	}
	// Nothing completes twice, also a little later.
	time.Sleep(20 * time.Millisecond)
	c.check(t)
	c2.check(t)
}

// testConcurrent: both sides post at once from several goroutines each,
// WRITEs of random sizes checked by READs, while messages flow both ways.
func testConcurrent(t *testing.T, o Options) {
	p := o.pair(t, func(c *PairConfig) { c.MaxMessage, c.RecvDepth = 256, 8 })
	const workers, rounds, span = 4, 40, 1 << 20
	iters := rounds
	if testing.Short() {
		iters = rounds / 4
	}
	var wg sync.WaitGroup
	errc := make(chan error, 4*workers)
	for _, s := range []*Side{p.Dialer, p.Acceptor} {
		peer := p.Peer(s)
		local := s.Host.NewRegion(workers*2*span, transport.AccessReadWrite)
		remote := peer.Host.NewRegion(workers*span, transport.AccessReadWrite)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				out := local.Bytes()[2*w*span : (2*w+1)*span]
				in := local.Bytes()[(2*w+1)*span : (2*w+2)*span]
				for i := range iters {
					n := 1 << rng.IntN(21) // 1 B to 1 MiB
					n = max(1, n-rng.IntN(n))
					Fill(out[:n], uint64(w<<20|i))
					at := remote.At(uint64(w*span + span - n))
					c := newTracker()
					wr := s.Host.Op(transport.OpWrite, out[:n], at, 0, c)
					s.Endpoint.Post([]*transport.Op{wr}, false)
					if err := c.await(wr); err != nil {
						errc <- err
						return
					}
					if wr.Err != nil {
						errc <- fmt.Errorf("write of %d bytes: %w", n, wr.Err)
						return
					}
					rd := s.Host.Op(transport.OpRead, in[:n], at, 0, c)
					s.Endpoint.Post([]*transport.Op{rd}, false)
					if err := c.await(rd); err != nil {
						errc <- err
						return
					}
					if rd.Err != nil {
						errc <- fmt.Errorf("read of %d bytes: %w", n, rd.Err)
						return
					}
					if !bytes.Equal(in[:n], out[:n]) {
						errc <- fmt.Errorf("worker %d round %d: %d bytes read back differ", w, i, n)
						return
					}
				}
			}()
		}
		// Messages in both directions meanwhile, each side consuming.
		msgs := s.Host.NewRegion(iters*256, transport.AccessReadWrite)
		wg.Add(2)
		go func() {
			defer wg.Done()
			c := newTracker()
			var ops []*transport.Op
			for i := range iters {
				m := message(i, 256)
				b := msgs.Bytes()[i*256 : i*256+len(m)]
				copy(b, m)
				op := s.Host.Op(transport.OpSend, b, transport.RemoteAddr{}, 0, c)
				ops = append(ops, op)
				s.Endpoint.Post([]*transport.Op{op}, false)
			}
			if err := c.await(ops...); err != nil {
				errc <- err
				return
			}
			for i, op := range ops {
				if op.Err != nil {
					errc <- fmt.Errorf("send %d: %w", i, op.Err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			for i := range iters {
				m, err := peer.Host.Recv(ctx)
				if err != nil {
					errc <- fmt.Errorf("message %d: %w", i, err)
					return
				}
				peer.Endpoint.Consumed(1)
				if !bytes.Equal(m, message(i, 256)) {
					errc <- fmt.Errorf("message %d: out of order, lost or damaged", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	mustUp(t, p.Dialer)
	mustUp(t, p.Acceptor)
}

// message is message i of the send tests: its length varies, and it
// starts with i.
func message(i, maxLen int) []byte {
	n := 8 + (i*37)%(maxLen-7)
	b := make([]byte, n)
	Fill(b, uint64(i))
	binary.LittleEndian.PutUint64(b, uint64(i))
	return b
}

func testSendOrder(t *testing.T, o Options) {
	p := o.pair(t, func(c *PairConfig) { c.MaxMessage, c.RecvDepth = 4096, 8 })
	const total = 300
	buf := p.Dialer.Host.NewRegion(total*4096, transport.AccessReadWrite)
	c := newTracker()
	var all []*transport.Op
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for i := range total {
			m, err := p.Acceptor.Host.Recv(ctx)
			if err != nil {
				errc <- fmt.Errorf("message %d: %w", i, err)
				return
			}
			p.Acceptor.Endpoint.Consumed(1)
			if !bytes.Equal(m, message(i, 4096)) {
				errc <- fmt.Errorf("message %d: %d bytes starting with %d: out of order, lost or damaged", i, len(m), binary.LittleEndian.Uint64(m))
				return
			}
		}
		errc <- nil
	}()
	// Posts of 1, 2, 3, ... messages: one Post may carry many sends.
	for i, k := 0, 1; i < total; k++ {
		var ops []*transport.Op
		for j := 0; j < k && i < total; j, i = j+1, i+1 {
			m := message(i, 4096)
			local := buf.Bytes()[i*4096 : i*4096+len(m)]
			copy(local, m)
			ops = append(ops, p.Dialer.Host.Op(transport.OpSend, local, transport.RemoteAddr{}, 0, c))
		}
		p.Dialer.Endpoint.Post(ops, false)
		all = append(all, ops...)
	}
	c.wait(t, all...)
	for i, op := range all {
		if op.Err != nil {
			t.Fatalf("send %d: %v", i, op.Err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func testSendMaxMessage(t *testing.T, o Options) {
	const maxMsg = 4096
	p := o.pair(t, func(c *PairConfig) { c.MaxMessage, c.RecvDepth = maxMsg, 8 })
	buf := p.Dialer.Host.NewRegion(2*maxMsg, transport.AccessReadWrite)
	Fill(buf.Bytes(), 3)
	if err := do(t, p.Dialer, transport.OpSend, buf.Bytes()[:maxMsg], transport.RemoteAddr{}, 0); err != nil {
		t.Fatalf("send of max_message bytes: %v", err)
	}
	if m := recv(t, p.Acceptor); !bytes.Equal(m, buf.Bytes()[:maxMsg]) {
		t.Fatalf("message of max_message bytes arrived as %d bytes, or damaged", len(m))
	}
	err := do(t, p.Dialer, transport.OpSend, buf.Bytes()[:maxMsg+1], transport.RemoteAddr{}, 0)
	if !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("send of max_message+1 bytes: %v, want an error matching ErrTooLarge", err)
	}
	// Nothing of it arrived; the endpoint still sends.
	if err := do(t, p.Dialer, transport.OpSend, buf.Bytes()[maxMsg:maxMsg+8], transport.RemoteAddr{}, 0); err != nil {
		t.Fatalf("send after a refused one: %v", err)
	}
	if m := recv(t, p.Acceptor); !bytes.Equal(m, buf.Bytes()[maxMsg:maxMsg+8]) {
		t.Fatalf("after a refused send, got a message of %d bytes, want the next 8-byte one", len(m))
	}
	mustUp(t, p.Dialer)
	mustUp(t, p.Acceptor)
}

func testSendCredits(t *testing.T, o Options) {
	const depth, total = 4, 12
	p := o.pair(t, func(c *PairConfig) { c.MaxMessage, c.RecvDepth = 64, depth })
	buf := p.Dialer.Host.NewRegion(total*64, transport.AccessReadWrite)
	c := newTracker()
	var ops []*transport.Op
	for i := range total {
		m := message(i, 64)
		local := buf.Bytes()[i*64 : i*64+len(m)]
		copy(local, m)
		ops = append(ops, p.Dialer.Host.Op(transport.OpSend, local, transport.RemoteAddr{}, 0, c))
	}
	p.Dialer.Endpoint.Post(ops, false)
	// Nobody consumes: exactly depth messages arrive, no more.
	deadline := time.Now().Add(timeout)
	for p.Acceptor.Host.Queued() < depth {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d messages arrived within the receive depth", p.Acceptor.Host.Queued(), depth)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if q := p.Acceptor.Host.Queued(); q != depth {
		t.Fatalf("%d messages arrived with none consumed, receive depth %d", q, depth)
	}
	mustUp(t, p.Dialer)
	// Consuming lets the rest go, in order, never more than depth queued.
	for i := range total {
		if q := p.Acceptor.Host.Queued(); q > depth {
			t.Fatalf("%d messages queued, receive depth %d", q, depth)
		}
		if m := recv(t, p.Acceptor); !bytes.Equal(m, message(i, 64)) {
			t.Fatalf("message %d: out of order, lost or damaged", i)
		}
	}
	c.wait(t, ops...)
	for i, op := range ops {
		if op.Err != nil {
			t.Fatalf("send %d: %v", i, op.Err)
		}
	}
}

func testBadAccess(t *testing.T, o Options) {
	p := o.pair(t, nil)
	ctx := ctxT(t)
	const size = 64 << 10
	rw := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	ro := p.Acceptor.Host.NewRegion(size, transport.AccessRead)
	wo := p.Acceptor.Host.NewRegion(size, transport.AccessWrite)
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	for i, r := range []*Region{rw, ro, wo} {
		Fill(r.Bytes(), uint64(300+i))
	}
	// Both sides have reached each region once before: a refusal must not
	// come from an empty cache only (shm maps, rdma registers on first use).
	for _, r := range []*Region{rw, ro} {
		if err := do(t, p.Dialer, transport.OpRead, local.Bytes()[:64], r.At(0), 0); err != nil {
			t.Fatalf("read of region %d: %v", r.ID(), err)
		}
	}
	Fill(local.Bytes(), 399)
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:64], rw.At(0), 0); err != nil {
		t.Fatalf("write of the read-write region: %v", err)
	}
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:64], wo.At(0), 0); err != nil {
		t.Fatalf("write of the write-only region: %v", err)
	}
	mustRefuse(t, p.Dialer, local, []*Region{rw, ro, wo}, 400, 0xbad, []accessCase{
		{"WriteWrongKey", transport.OpWrite, wrongKey(rw.At(0)), 4096},
		{"ReadWrongKey", transport.OpRead, wrongKey(rw.At(0)), 4096},
		{"WriteNotifyWrongKey", transport.OpWriteImm, wrongKey(rw.At(0)), 64},
		{"WriteUnknownRegion", transport.OpWrite, transport.RemoteAddr{Region: 9999, Addr: rw.Base(), Key: rw.Key()}, 64},
		{"ReadUnknownRegion", transport.OpRead, transport.RemoteAddr{Region: 9999, Addr: rw.Base(), Key: rw.Key()}, 64},
		{"WriteRegionZero", transport.OpWrite, transport.RemoteAddr{Region: 0, Addr: rw.Base(), Key: rw.Key()}, 64},
		{"WritePastEnd", transport.OpWrite, rw.At(size - 100), 4096},
		{"WriteOneBytePastEnd", transport.OpWrite, rw.At(size - 4095), 4096},
		{"WriteAtEnd", transport.OpWrite, rw.At(size), 1},
		{"ReadPastEnd", transport.OpRead, rw.At(size - 1), 2},
		{"WriteBeforeBase", transport.OpWrite, transport.RemoteAddr{Region: rw.ID(), Addr: rw.Base() - 1, Key: rw.Key()}, 16},
		{"ReadBeforeBase", transport.OpRead, transport.RemoteAddr{Region: rw.ID(), Addr: rw.Base() - 4096, Key: rw.Key()}, 4096},
		{"WriteWrapping", transport.OpWrite, transport.RemoteAddr{Region: rw.ID(), Addr: math.MaxUint64 - 100, Key: rw.Key()}, 4096},
		{"ReadWrapping", transport.OpRead, transport.RemoteAddr{Region: rw.ID(), Addr: math.MaxUint64 - 2047, Key: rw.Key()}, 4096},
		{"WriteNotifyPastEnd", transport.OpWriteImm, rw.At(size - 8), 64},
		{"WriteReadOnly", transport.OpWrite, ro.At(0), 64},
		{"WriteNotifyReadOnly", transport.OpWriteImm, ro.At(0), 64},
		{"ReadWriteOnly", transport.OpRead, wo.At(0), 64},
	})
	// The endpoints stay up, refused notifications reached nobody, and
	// proper operations still work.
	mustUp(t, p.Dialer)
	mustUp(t, p.Acceptor)
	if err := do(t, p.Dialer, transport.OpWriteImm, local.Bytes()[:64], rw.At(128), 77); err != nil {
		t.Fatalf("write-with-notify after refusals: %v", err)
	}
	note, err := p.Acceptor.Host.WaitNotify(ctx)
	if err != nil || note.Value != 77 {
		t.Fatalf("first notification after refused ones: %+v, %v; want value 77", note, err)
	}
	if err := do(t, p.Dialer, transport.OpRead, local.Bytes()[:64], ro.At(64), 0); err != nil {
		t.Fatalf("read after refusals: %v", err)
	}
	if !bytes.Equal(local.Bytes()[:64], ro.Bytes()[64:128]) {
		t.Fatal("read after refusals: data differs")
	}
}

// accessCase is an operation that its target must refuse.
type accessCase struct {
	name   string
	kind   transport.OpKind
	remote transport.RemoteAddr
	n      int // bytes, from the start of the local buffer
}

// wrongKey returns a with a key its region never had.
func wrongKey(a transport.RemoteAddr) transport.RemoteAddr { a.Key ^= 1 << 17; return a }

// mustRefuse runs each case from s, with imm and the local buffer filled
// from seed on, and fails t unless each fails with ErrRemoteAccess and
// touches nothing: neither the target's regions nor the local buffer.
func mustRefuse(t *testing.T, s *Side, local *Region, regions []*Region, seed uint64, imm uint32, cases []accessCase) {
	t.Helper()
	snap := map[*Region][]byte{}
	for _, r := range regions {
		snap[r] = bytes.Clone(r.Bytes())
	}
	for i, tc := range cases {
		lb := local.Bytes()[:tc.n]
		Fill(lb, seed+uint64(i))
		lsnap := bytes.Clone(lb)
		err := do(t, s, tc.kind, lb, tc.remote, imm)
		if !errors.Is(err, transport.ErrRemoteAccess) {
			t.Errorf("%s: %v, want an error matching ErrRemoteAccess", tc.name, err)
		}
		for _, r := range regions {
			if !bytes.Equal(r.Bytes(), snap[r]) {
				t.Fatalf("%s: refused, but region %d (%s) changed", tc.name, r.ID(), r.Access())
			}
		}
		if !bytes.Equal(lb, lsnap) {
			t.Fatalf("%s: refused, but the local buffer changed", tc.name)
		}
	}
}

// testBadAccessLarge: operations of several MiB, which the stream
// transports cut into slices over their connections and rdma over its
// queue pairs, are refused whole, as small ones are: with nothing touched,
// neither the target's region nor the local buffer, also when only their
// last bytes lie outside the region.
func testBadAccessLarge(t *testing.T, o Options) {
	p := o.pair(t, nil)
	const size = 8 << 20
	rw := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	ro := p.Acceptor.Host.NewRegion(size, transport.AccessRead)
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	Fill(rw.Bytes(), 500)
	Fill(ro.Bytes(), 501)
	mustRefuse(t, p.Dialer, local, []*Region{rw, ro}, 600, 0, []accessCase{
		{"WritePastEnd", transport.OpWrite, rw.At(4096), size},
		{"ReadPastEnd", transport.OpRead, rw.At(1), size},
		{"WriteBeforeBase", transport.OpWrite, transport.RemoteAddr{Region: rw.ID(), Addr: rw.Base() - 4096, Key: rw.Key()}, 4 << 20},
		{"ReadBeforeBase", transport.OpRead, transport.RemoteAddr{Region: rw.ID(), Addr: rw.Base() - 1, Key: rw.Key()}, 4 << 20},
		{"WriteWrongKey", transport.OpWrite, wrongKey(rw.At(0)), 4 << 20},
		{"ReadWrongKey", transport.OpRead, wrongKey(rw.At(0)), 4 << 20},
		{"WriteReadOnly", transport.OpWrite, ro.At(0), 4 << 20},
	})
	mustUp(t, p.Dialer)
	mustUp(t, p.Acceptor)
	// A proper large WRITE and READ still work.
	Fill(local.Bytes(), 700)
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes(), rw.At(0), 0); err != nil {
		t.Fatalf("write after refusals: %v", err)
	}
	if !bytes.Equal(rw.Bytes(), local.Bytes()) {
		t.Fatal("write after refusals: target differs from source")
	}
	clear(local.Bytes())
	if err := do(t, p.Dialer, transport.OpRead, local.Bytes(), ro.At(0), 0); err != nil {
		t.Fatalf("read after refusals: %v", err)
	}
	if !bytes.Equal(local.Bytes(), ro.Bytes()) {
		t.Fatal("read after refusals: data differs")
	}
}

func testRevoke(t *testing.T, o Options) {
	p := o.pair(t, nil)
	const size = 1 << 20
	r := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	Fill(local.Bytes(), 500)
	// Reach it first, so that a transport that maps or registers it on
	// first use has done so.
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:size], r.At(0), 0); err != nil {
		t.Fatal(err)
	}
	if err := do(t, p.Dialer, transport.OpRead, local.Bytes()[:4096], r.At(0), 0); err != nil {
		t.Fatal(err)
	}
	old := r.At(0)
	if err := r.Close(); err != nil {
		t.Fatalf("close region: %v", err)
	}
	// refused checks the error of an operation on the revoked region.
	refused := func(what string, err error) {
		t.Helper()
		if errors.Is(err, transport.ErrRemoteAccess) {
			return
		}
		if o.StaleAccessFails && errors.Is(err, net.ErrClosed) && downSoon(p.Dialer) {
			return // the endpoint went down, and fails what it is given
		}
		t.Fatalf("%s: %v, want an error matching ErrRemoteAccess", what, err)
	}
	// The revocation travels to the initiator on its own; operations that
	// raced it may still have been served. Once one is refused, every
	// later one must be: none is served from a stale mapping.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:4096], old, 0)
		if err != nil {
			refused("write to a revoked region", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a revoked region still succeed 10s after the revocation")
		}
		time.Sleep(time.Millisecond)
	}
	// A new region, likely at the same address, must not receive them.
	r2 := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	Fill(r2.Bytes(), 501)
	snap := append([]byte(nil), r2.Bytes()...)
	for i := range 20 {
		kind := transport.OpWrite
		if i%2 == 1 {
			kind = transport.OpRead
		}
		refused(fmt.Sprintf("%s %d of a revoked region", kind, i), do(t, p.Dialer, kind, local.Bytes()[:size], old, 0))
	}
	if !bytes.Equal(r2.Bytes(), snap) {
		t.Fatal("operations on a revoked region changed a newer region")
	}
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:4096], r2.At(0), 0); err != nil {
		if o.StaleAccessFails && errors.Is(err, net.ErrClosed) && downSoon(p.Dialer) {
			t.Logf("an operation that raced the revocation took the endpoint down: %v", p.Dialer.Endpoint.Err())
			return
		}
		t.Fatalf("write to the new region: %v", err)
	}
	if !bytes.Equal(r2.Bytes()[:4096], local.Bytes()[:4096]) {
		t.Fatal("write to the new region: data differs")
	}
	mustUp(t, p.Dialer)
}

// downSoon reports whether s's endpoint is down, or goes down within a
// second: an operation that fails the endpoint may complete, with the
// reason, a moment before the endpoint records it (rdma).
func downSoon(s *Side) bool {
	deadline := time.Now().Add(time.Second)
	for s.Endpoint.Err() == nil {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// An operation of a kind the contract does not define completes once, at
// once, with an error matching errors.ErrUnsupported, and the endpoint
// stays up.
func testUnknownKind(t *testing.T, o Options) {
	p := o.pair(t, nil)
	dst := p.Acceptor.Host.NewRegion(4096, transport.AccessReadWrite)
	local := p.Dialer.Host.NewRegion(4096, transport.AccessReadWrite)
	for _, kind := range []transport.OpKind{0, transport.NumOpKinds, 200} {
		err := do(t, p.Dialer, kind, local.Bytes()[:64], dst.At(0), 0)
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("kind %d: %v, want errors.ErrUnsupported", kind, err)
		}
	}
	mustUp(t, p.Dialer)
	if err := do(t, p.Dialer, transport.OpWrite, local.Bytes()[:64], dst.At(0), 0); err != nil {
		t.Fatalf("a WRITE after the unknown kinds: %v", err)
	}
}

// Post with wait (a caller that waits at once) keeps the same contract as
// without: each operation completes exactly once, with its data in place,
// alone or in a batch.
func testPostWait(t *testing.T, o Options) {
	p := o.pair(t, nil)
	const n = 64 << 10
	dst := p.Acceptor.Host.NewRegion(n, transport.AccessReadWrite)
	local := p.Dialer.Host.NewRegion(2*n, transport.AccessReadWrite)
	Fill(local.Bytes()[:n], 17)
	c := newTracker()
	op := p.Dialer.Host.Op(transport.OpWrite, local.Bytes()[:n], dst.At(0), 0, c)
	p.Dialer.Endpoint.Post([]*transport.Op{op}, true)
	c.wait(t, op)
	if op.Err != nil {
		t.Fatalf("write: %v", op.Err)
	}
	c = newTracker()
	var ops []*transport.Op
	for i := range 8 {
		ops = append(ops, p.Dialer.Host.Op(transport.OpRead, local.Bytes()[n+i*(n/8):n+(i+1)*(n/8)], dst.At(uint64(i*(n/8))), 0, c))
	}
	p.Dialer.Endpoint.Post(ops, true)
	for _, op := range ops {
		c.wait(t, op)
		if op.Err != nil {
			t.Fatalf("read: %v", op.Err)
		}
	}
	c.check(t)
	if !bytes.Equal(local.Bytes()[n:], local.Bytes()[:n]) {
		t.Fatal("the READs posted with wait returned other bytes than the WRITE wrote")
	}
}

func testCancel(t *testing.T, o Options) {
	p := o.pair(t, func(c *PairConfig) { c.RecvDepth = 2 })
	const n = 1 << 20
	dst := p.Acceptor.Host.NewRegion(n, transport.AccessReadWrite)
	Fill(dst.Bytes(), 600)
	local := p.Dialer.Host.NewRegion(40*n, transport.AccessReadWrite)
	// An operation that completed cannot be cancelled.
	c := newTracker()
	op := p.Dialer.Host.Op(transport.OpRead, local.Bytes()[:64], dst.At(0), 0, c)
	p.Dialer.Endpoint.Post([]*transport.Op{op}, false)
	c.wait(t, op)
	if p.Dialer.Endpoint.Cancel(op) {
		t.Fatal("Cancel of a completed operation returned true")
	}
	// READs cancelled at once: each either never completes and is never
	// written into, or completes exactly once.
	c = newTracker()
	var ops []*transport.Op
	for i := range 32 {
		ops = append(ops, p.Dialer.Host.Op(transport.OpRead, local.Bytes()[i*n:(i+1)*n], dst.At(0), 0, c))
	}
	p.Dialer.Endpoint.Post(ops, false)
	var cancelled, kept []*transport.Op
	for i := len(ops) - 1; i >= 0; i-- {
		if p.Dialer.Endpoint.Cancel(ops[i]) {
			cancelled = append(cancelled, ops[i])
			Fill(ops[i].Local, 601) // the endpoint no longer touches it
		} else {
			kept = append(kept, ops[i])
		}
	}
	c.wait(t, kept...)
	// A round trip after them, then a pause: late data of a cancelled
	// READ would have arrived by now.
	if err := do(t, p.Dialer, transport.OpRead, local.Bytes()[39*n:39*n+64], dst.At(0), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	want := make([]byte, n)
	Fill(want, 601)
	for _, op := range cancelled {
		if k := c.times(op); k != 0 {
			t.Fatalf("a cancelled READ completed %d times", k)
		}
		if !bytes.Equal(op.Local, want) {
			t.Fatal("a cancelled READ wrote into its buffer after Cancel returned true")
		}
	}
	for _, op := range kept {
		if op.Err != nil {
			t.Fatalf("READ that could not be cancelled: %v", op.Err)
		}
	}
	t.Logf("%d of %d READs cancelled", len(cancelled), len(ops))
	// A send waiting for credit: cancelled, it never arrives.
	msgs := p.Dialer.Host.NewRegion(4096, transport.AccessReadWrite)
	c = newTracker()
	var sends []*transport.Op
	for i := range 4 {
		b := msgs.Bytes()[i*8 : i*8+8]
		binary.LittleEndian.PutUint64(b, uint64(i))
		sends = append(sends, p.Dialer.Host.Op(transport.OpSend, b, transport.RemoteAddr{}, 0, c))
	}
	p.Dialer.Endpoint.Post(sends[:3], false) // the third waits: depth 2
	deadline := time.Now().Add(timeout)
	for p.Acceptor.Host.Queued() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	third := p.Dialer.Endpoint.Cancel(sends[2])
	p.Dialer.Endpoint.Post(sends[3:], false)
	var got []uint64
	for range 3 {
		got = append(got, binary.LittleEndian.Uint64(recv(t, p.Acceptor)))
	}
	if third {
		if got[0] != 0 || got[1] != 1 || got[2] != 3 {
			t.Fatalf("messages %v arrived, want 0 1 3 (2 was cancelled)", got)
		}
		c.wait(t, sends[0], sends[1], sends[3])
		if k := c.times(sends[2]); k != 0 {
			t.Fatalf("a cancelled send completed %d times", k)
		}
	} else {
		got = append(got, binary.LittleEndian.Uint64(recv(t, p.Acceptor)))
		if got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
			t.Fatalf("messages %v arrived, want 0 1 2 3", got)
		}
		c.wait(t, sends...)
	}
	mustUp(t, p.Dialer)
}

func testClose(t *testing.T, o Options) {
	ignore := goleak.IgnoreCurrent()
	t.Run("InFlight", func(t *testing.T) { testCloseInFlight(t, o) })
	if err := goleak.Find(ignore); err != nil {
		t.Fatalf("goroutines left after both endpoints, their hosts and transports closed: %v", err)
	}
}

func testCloseInFlight(t *testing.T, o Options) {
	p := o.pair(t, func(c *PairConfig) { c.RecvDepth = 2 })
	for _, s := range []*Side{p.Dialer, p.Acceptor} {
		mustUp(t, s)
	}
	const n = 1 << 20
	dst := p.Acceptor.Host.NewRegion(n, transport.AccessReadWrite)
	local := p.Dialer.Host.NewRegion(34*n, transport.AccessReadWrite)
	c := newTracker()
	var ops, sends []*transport.Op
	for i := range 32 {
		kind := transport.OpWrite
		if i%2 == 1 {
			kind = transport.OpRead
		}
		ops = append(ops, p.Dialer.Host.Op(kind, local.Bytes()[i*n:(i+1)*n], dst.At(0), 0, c))
	}
	for i := range 6 { // 2 go out, 4 wait for credits that never come
		sends = append(sends, p.Dialer.Host.Op(transport.OpSend, local.Bytes()[32*n+i*64:32*n+i*64+64], transport.RemoteAddr{}, 0, c))
	}
	p.Dialer.Endpoint.Post(sends, false)
	deadline := time.Now().Add(timeout)
	for p.Acceptor.Host.Queued() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the first two messages never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the others settle waiting for credit
	p.Dialer.Endpoint.Post(ops, false)
	if err := p.Dialer.Endpoint.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close failed what was outstanding before it returned.
	all := append(append([]*transport.Op(nil), ops...), sends...)
	for i, op := range all {
		if k := c.times(op); k != 1 {
			t.Fatalf("op %d (%s) completed %d times by the time Close returned, want once", i, op.Kind, k)
		}
		if op.Err != nil && !errors.Is(op.Err, net.ErrClosed) {
			t.Fatalf("op %d (%s) in flight at Close: %v, want nil or an error matching net.ErrClosed", i, op.Kind, op.Err)
		}
	}
	for i, op := range sends[2:] {
		if !errors.Is(op.Err, net.ErrClosed) {
			t.Fatalf("send %d waiting for credit at Close: %v, want an error matching net.ErrClosed", i+2, op.Err)
		}
	}
	select {
	case <-p.Dialer.Endpoint.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := p.Dialer.Endpoint.Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Err after Close: %v, want an error matching net.ErrClosed", err)
	}
	// Post after Close completes at once, with an error.
	post := func(s *Side, what string) {
		t.Helper()
		c := newTracker()
		b := s.Host.NewRegion(4096, transport.AccessReadWrite).Bytes()
		late := []*transport.Op{
			s.Host.Op(transport.OpWrite, b[:64], dst.At(0), 0, c),
			s.Host.Op(transport.OpRead, b[64:128], dst.At(0), 0, c),
			s.Host.Op(transport.OpWriteImm, b[128:192], dst.At(0), 1, c),
			s.Host.Op(transport.OpSend, b[192:256], transport.RemoteAddr{}, 0, c),
		}
		s.Endpoint.Post(late, false)
		for _, op := range late {
			if k := c.times(op); k != 1 {
				t.Fatalf("%s %s: completed %d times when Post returned, want once", what, op.Kind, k)
			}
			if !errors.Is(op.Err, net.ErrClosed) {
				t.Fatalf("%s %s: %v, want an error matching net.ErrClosed", what, op.Kind, op.Err)
			}
		}
	}
	post(p.Dialer, "post after Close:")
	// Close is idempotent.
	p.Dialer.Endpoint.Close()
	c.check(t)
	// The peer notices: its endpoint goes down, and fails what it is given.
	select {
	case <-p.Acceptor.Endpoint.Done():
	case <-time.After(timeout):
		t.Fatal("the acceptor's endpoint is still up after the dialer's closed")
	}
	if err := p.Acceptor.Endpoint.Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the acceptor's Err after the dialer's Close: %v, want an error matching net.ErrClosed", err)
	}
	post(p.Acceptor, "post to an endpoint whose peer closed:")
	if err := p.Acceptor.Endpoint.Close(); err != nil {
		t.Fatalf("Close of an endpoint whose peer closed: %v", err)
	}
}

func testAppender(t *testing.T, o Options) {
	const depth = 8
	p := o.pair(t, func(c *PairConfig) { c.RecvDepth = depth })
	a, ok := p.Dialer.Endpoint.(transport.Appender)
	if !ok {
		t.Skipf("%s endpoints do not implement transport.Appender", p.Dialer.Transport.Name())
	}
	var seq uint64
	calls := 0
	fill := func(b []byte) []byte {
		calls++
		return binary.LittleEndian.AppendUint64(b, seq)
	}
	ok, err := a.AppendSend(8, fill)
	if err != nil {
		t.Fatalf("AppendSend: %v", err)
	}
	if !ok {
		if calls != 0 {
			t.Fatal("AppendSend reported false after calling fill")
		}
		t.Skipf("%s endpoints decline appended messages with credit left", p.Dialer.Transport.Name())
	}
	if calls != 1 {
		t.Fatalf("AppendSend called fill %d times", calls)
	}
	// Appended messages and OpSends interleave in order until the peer's
	// credits run out.
	buf := p.Dialer.Host.NewRegion(4096, transport.AccessReadWrite)
	for seq = 1; seq < depth; seq++ {
		if seq%2 == 1 {
			b := buf.Bytes()[seq*8 : seq*8+8]
			binary.LittleEndian.PutUint64(b, seq)
			if err := do(t, p.Dialer, transport.OpSend, b, transport.RemoteAddr{}, 0); err != nil {
				t.Fatalf("send %d: %v", seq, err)
			}
			continue
		}
		if ok, err := a.AppendSend(8, fill); !ok || err != nil {
			t.Fatalf("AppendSend %d with credit left: %v, %v", seq, ok, err)
		}
	}
	before := calls
	if ok, err := a.AppendSend(8, fill); ok || err != nil || calls != before {
		t.Fatalf("AppendSend with no credit left: %v, %v, fill called %d times; want false without calling fill", ok, err, calls-before)
	}
	for i := range depth {
		if m := recv(t, p.Acceptor); len(m) != 8 || binary.LittleEndian.Uint64(m) != uint64(i) {
			t.Fatalf("message %d: %x (out of order or lost)", i, m)
		}
	}
	// A fill longer than its bound: an error, and nothing sent.
	RefusesLongFill(t, "AppendSend", a.AppendSend)
	deadline := time.Now().Add(timeout)
	for {
		ok, err := a.AppendSend(8, fill)
		if err != nil {
			t.Fatalf("AppendSend after a refused fill: %v", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no credit came back")
		}
		time.Sleep(time.Millisecond)
	}
	if m := recv(t, p.Acceptor); len(m) != 8 || binary.LittleEndian.Uint64(m) != depth {
		t.Fatalf("message after a refused fill: %x, want %d", m, depth)
	}
	mustUp(t, p.Dialer)
}

// testCounter: an endpoint that counts its own operations
// (transport.Counter) counts every operation posted, by kind, the failed
// ones too, and the bytes of those that succeeded only, whichever way each
// went (shm: a copy once the region is mapped, the stream before).
func testCounter(t *testing.T, o Options) {
	p := o.pair(t, nil)
	c, ok := p.Dialer.Endpoint.(transport.Counter)
	if !ok {
		t.Skipf("%s endpoints do not implement transport.Counter", p.Dialer.Transport.Name())
	}
	ctx := ctxT(t)
	const size = 64 << 10
	local := p.Dialer.Host.NewRegion(size, transport.AccessReadWrite)
	dst := p.Acceptor.Host.NewRegion(size, transport.AccessReadWrite)
	before := c.Counts()
	var want transport.Counts
	post := func(kind transport.OpKind, n int, remote transport.RemoteAddr, fails bool) {
		t.Helper()
		err := do(t, p.Dialer, kind, local.Bytes()[:n], remote, 7)
		if (err != nil) != fails {
			t.Fatalf("%s of %d bytes at %#x: error %v, want one: %v", kind, n, remote.Addr, err, fails)
		}
		want.Ops[kind]++
		switch {
		case fails:
		case kind == transport.OpRead:
			want.Received += uint64(n)
		default:
			want.Sent += uint64(n)
		}
	}
	for i := range 50 {
		post(transport.OpWrite, 64+i, dst.At(uint64(i)*64), false)
		post(transport.OpRead, 100, dst.At(0), false)
	}
	post(transport.OpWriteImm, 300, dst.At(4096), false)
	if _, err := p.Acceptor.Host.WaitNotify(ctx); err != nil {
		t.Fatal(err)
	}
	post(transport.OpSend, 40, transport.RemoteAddr{}, false)
	recv(t, p.Acceptor)
	post(transport.OpWrite, 4096, dst.At(size-100), true)
	post(transport.OpRead, 4096, dst.At(size-100), true)
	bad := dst.At(0)
	bad.Key ^= 1 << 17
	post(transport.OpWrite, 64, bad, true)
	got := c.Counts()
	for i := range got.Ops {
		got.Ops[i] -= before.Ops[i]
	}
	got.Sent -= before.Sent
	got.Received -= before.Received
	if got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	mustUp(t, p.Dialer)
}

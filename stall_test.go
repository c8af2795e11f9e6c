package xfer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// relay is a TCP relay between a client and a server on loopback that the
// test can freeze (it stops reading and writing, as a stopped or hung peer
// does, without closing anything) or slow down (it forwards at most rate
// bytes per second).
type relay struct {
	ln     net.Listener
	target string
	rate   int // bytes per second; 0: as fast as it can

	mu      sync.Mutex
	frozen  bool
	thaw    chan struct{} // closed when the relay thaws
	conns   []net.Conn
	wg      sync.WaitGroup
	read    atomic.Int64 // bytes read from either side, held or forwarded
	reading atomic.Int64 // pipes waiting in Read
}

func newRelay(t *testing.T, target string, rate int) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, rate: rate, thaw: make(chan struct{})}
	close(r.thaw)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, s)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(s, c)
		go r.pipe(c, s)
	}
}

// pipe copies from src to dst, waiting while the relay is frozen.
func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		r.mu.Lock()
		thaw := r.thaw
		r.mu.Unlock()
		<-thaw
		r.reading.Add(1)
		n, err := src.Read(buf)
		r.reading.Add(-1)
		if n > 0 {
			r.read.Add(int64(n))
			r.mu.Lock()
			thaw = r.thaw
			r.mu.Unlock()
			<-thaw // frozen while the read was under way: hold the bytes
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if r.rate > 0 {
				time.Sleep(time.Duration(n) * time.Second / time.Duration(r.rate))
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			return
		}
	}
}

func (r *relay) freeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.frozen {
		r.frozen, r.thaw = true, make(chan struct{})
	}
}

func (r *relay) unfreeze() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.frozen {
		r.frozen = false
		close(r.thaw)
	}
}

func (r *relay) close() {
	r.unfreeze()
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// relayedServer opens a tcp server engine that exports a region of size
// bytes as "target", and returns a relay to it at rate (newRelay); the
// engine closes when the test ends.
func relayedServer(t *testing.T, size, rate int) *relay {
	t.Helper()
	srv, err := xfer.Open(context.Background(), xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	target, err := srv.NewRegion(size, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("target", target)
	return newRelay(t, srv.Addr(), rate)
}

// stallPair opens a server and a client over tcp, the client dialing the
// server through a relay, with the client's op_timeout.
func stallPair(t *testing.T, opTimeout time.Duration, rate int) (*xfer.Engine, *xfer.Peer, xfer.RegionDesc, *relay) {
	t.Helper()
	return relayedPair(t, 64<<20, rate, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 72, OpTimeout: opTimeout})
}

// patterned allocates n bytes from cli's pool, filled with a pattern
// that no shifted or torn copy matches.
func patterned(t *testing.T, cli *xfer.Engine, n int) xfer.Buffer {
	t.Helper()
	buf, err := cli.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i * 13)
	}
	return buf
}

// relayedPair dials, from a new engine of cfg, a server behind a relay
// (relayedServer(t, size, rate)), and returns the engine, its peer, the
// server's region "target" and the relay.
func relayedPair(t *testing.T, size, rate int, cfg xfer.Config) (*xfer.Engine, *xfer.Peer, xfer.RegionDesc, *relay) {
	t.Helper()
	ctx := context.Background()
	r := relayedServer(t, size, rate)
	cli, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p, err := cli.Dial(ctx, r.addr())
	if err != nil {
		t.Fatal(err)
	}
	desc, _ := p.Region("target")
	return cli, p, desc, r
}

// A peer that stops (its relay freezes: no byte moves, nothing is closed)
// fails the operations outstanding with it once op_timeout passes with no
// progress, with an error that names the peer, the operation and the
// timeout; a context without a deadline does not keep them waiting. Once
// the peer moves again, the next operation reconnects.
func TestOpTimeoutStalledPeer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cli, p, desc, r := stallPair(t, timeout, 0)
	ctx := context.Background()
	buf, err := cli.Alloc(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	// written again, once the relay moves again: the next operation
	// reconnects.
	writeAgain := func() {
		t.Helper()
		r.unfreeze()
		for i := 0; ; i++ {
			err := p.Write(ctx, buf.Bytes()[:1<<20], desc.At(0))
			if err == nil {
				return
			}
			if i == 100 {
				t.Fatalf("the peer moves again, but writes still fail: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	writeAgain()

	// A batch: every operation ends, with the stall's error.
	r.freeze()
	b := p.Submit([]xfer.Op{
		{Kind: xfer.OpWrite, Local: buf.Bytes()[:32<<20], Remote: desc.At(0)},
		{Kind: xfer.OpRead, Local: buf.Bytes()[32<<20:], Remote: desc.At(32 << 20)},
	})
	if err := b.Wait(ctx); !errors.Is(err, xfer.ErrStalled) {
		t.Fatalf("a batch to a stopped peer: %v, want ErrStalled", err)
	}
	writeAgain()

	// A synchronous write.
	r.freeze()
	start := time.Now()
	err = p.Write(ctx, buf.Bytes(), desc.At(0)) // 64 MiB: more than the sockets hold
	took := time.Since(start)
	var se *xfer.StallError
	if !errors.As(err, &se) || !errors.Is(err, xfer.ErrStalled) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a stopped peer: %v (%T), want a StallError", err, err)
	}
	for _, want := range []string{"write", r.addr(), "op_timeout", timeout.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took < timeout || took > 20*timeout {
		t.Errorf("the write failed after %v: want op_timeout (%v) and a little more", took, timeout)
	}
	writeAgain()
}

// A large operation on a slow link is not cut short: its bytes keep
// moving, though it takes several times op_timeout.
func TestOpTimeoutSlowLink(t *testing.T) {
	const timeout = 200 * time.Millisecond
	cli, p, desc, _ := stallPair(t, timeout, 4<<20) // 4 MiB/s
	ctx := context.Background()
	buf, err := cli.Alloc(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("an 8 MiB write at 4 MiB/s with op_timeout %v: %v", timeout, err)
	}
	if err := p.Read(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("an 8 MiB read at 4 MiB/s with op_timeout %v: %v", timeout, err)
	}
	if took := time.Since(start); took < 2*timeout {
		t.Logf("the relay was faster than it should be (%v): the test proves less", took)
	}
}

// A call whose context ends returns at once, also when the transport
// cannot take the operation back (over tcp, a WRITE sent by reference from
// memfd memory: the kernel reads it until the peer has it). The abandoned
// operation keeps its bytes: freed, they stay in use, not handed out
// again, until the transport is done with them.
func TestAbandonedWriteHoldsItsBytes(t *testing.T) {
	ctx := context.Background()
	cli, p, desc, r, buf := byReferencePair(t)
	pool := cli.Pool()
	r.freeze()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err := p.Write(cctx, buf.Bytes(), desc.At(0))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("write past its deadline: %v, want an abandoned DeadlineExceeded", err)
	}
	if err := pool.Free(buf.Buffer); err != nil {
		t.Fatal(err)
	}
	if s := pool.Stats(); s.InUse != 256<<10 {
		t.Fatalf("after the abandoned WRITE's buffer was freed: %d bytes in use, want its 256 KiB held", s.InUse)
	}
	if b, err := cli.Alloc(int(pool.Stats().Capacity)); err == nil {
		pool.Free(b.Buffer)
		t.Fatal("the bytes of an abandoned WRITE were handed out again")
	}
	// Once the peer moves again the WRITE completes, and they come back.
	r.unfreeze()
	for i := 0; pool.Stats().InUse != 0; i++ {
		if i == 500 {
			t.Fatalf("the abandoned WRITE's bytes never came back: %d bytes in use", pool.Stats().InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idle waits until every pipe of the relay waits in Read: frozen then,
// it still reads the next bytes either side sends (and holds them).
func (r *relay) idle(t *testing.T) {
	t.Helper()
	for i := 0; ; i++ {
		r.mu.Lock()
		pipes := int64(len(r.conns))
		r.mu.Unlock()
		if r.reading.Load() == pipes {
			return
		}
		if i == 10000 {
			t.Fatalf("the relay's pipes are not idle after 10 s: %d of %d reading", r.reading.Load(), pipes)
		}
		time.Sleep(time.Millisecond)
	}
}

// cut closes every connection the relay carries, as a broken link or a
// removed device ends a connection under its operations.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// An operation that is safe to repeat (a WRITE, a READ) whose connection
// is lost under it is repeated on a new connection, and the caller never
// sees the break; the status and the log say so. One that is not (a
// write-with-notify) fails with ErrPeerLost.
func TestFailoverRepeatsSafeOperations(t *testing.T) {
	ctx := context.Background()
	cli, p, desc, r := stallPair(t, time.Minute, 0)
	buf := patterned(t, cli, 16<<20)
	for _, kind := range []string{"write", "read"} {
		r.freeze()
		done := make(chan error, 1)
		go func() {
			if kind == "write" {
				done <- p.Write(ctx, buf.Bytes()[:8<<20], desc.At(0))
			} else {
				done <- p.Read(ctx, buf.Bytes()[8<<20:], desc.At(0))
			}
		}()
		time.Sleep(100 * time.Millisecond) // under way, held by the frozen relay
		r.cut()
		r.unfreeze()
		if err := <-done; err != nil {
			t.Fatalf("%s across a lost connection: %v", kind, err)
		}
	}
	if !bytes.Equal(buf.Bytes()[:8<<20], buf.Bytes()[8<<20:]) {
		t.Fatal("the READ repeated after the break returned other bytes than the WRITE repeated after the break wrote")
	}
	st := cli.Status()
	if st.Failovers != 2 || len(st.RecentFailovers) != 2 || st.RecentFailovers[0].From != "tcp" || st.RecentFailovers[0].Op != "write" {
		t.Errorf("status: %d failovers, %+v; want the write's and the read's", st.Failovers, st.RecentFailovers)
	}
	// A write-with-notify is not repeated.
	r.freeze()
	done := make(chan error, 1)
	go func() { done <- p.WriteNotify(ctx, buf.Bytes()[:8<<20], desc.At(0), 7) }()
	time.Sleep(100 * time.Millisecond)
	r.cut()
	r.unfreeze()
	if err := <-done; !errors.Is(err, xfer.ErrPeerLost) {
		t.Fatalf("write-with-notify across a lost connection: %v, want ErrPeerLost", err)
	}
}

// byReferencePair is a tcp client that WRITEs by reference (memfd memory,
// no op_timeout) to a server's region "target" through a relay the test
// can freeze, and a 256 KiB buffer of the client's pool: small enough for
// the sockets' buffers. The engines close when the test ends.
func byReferencePair(t *testing.T) (*xfer.Engine, *xfer.Peer, xfer.RegionDesc, *relay, xfer.Buffer) {
	t.Helper()
	cli, p, desc, r := relayedPair(t, 4<<20, 0, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 8, Memory: xfer.MemoryMemfd, OpTimeout: -1})
	buf, err := cli.Alloc(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	return cli, p, desc, r, buf
}

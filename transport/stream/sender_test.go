package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// The sender's tests run it on a real loopback TCP connection and read what
// it wrote on the other end. Frames here are: a 12-byte header (payload
// length, writer, sequence number) and a payload whose bytes derive from
// writer and sequence number, so a reordered, lost, duplicated or torn frame
// is caught.

const testHdrLen = 12

func testFrame(writer, seq, n int) (hdr, payload []byte) {
	hdr = make([]byte, testHdrLen)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(n))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(writer))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(seq))
	payload = make([]byte, n)
	for i := range payload {
		payload[i] = byte(writer*31 + seq*7 + i)
	}
	return hdr, payload
}

// readFrames reads frames from r until it has want of them, checking that
// each writer's come in sequence and intact.
func readFrames(r io.Reader, want int) error {
	next := map[int]int{}
	hdr := make([]byte, testHdrLen)
	for range want {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return err
		}
		n := int(binary.LittleEndian.Uint32(hdr[0:]))
		w := int(binary.LittleEndian.Uint32(hdr[4:]))
		seq := int(binary.LittleEndian.Uint32(hdr[8:]))
		if seq != next[w] {
			return fmt.Errorf("writer %d: frame %d came where %d was due", w, seq, next[w])
		}
		next[w]++
		got := make([]byte, n)
		if _, err := io.ReadFull(r, got); err != nil {
			return err
		}
		if _, exp := testFrame(w, seq, n); !bytes.Equal(got, exp) {
			return fmt.Errorf("writer %d frame %d: payload differs", w, seq)
		}
	}
	return nil
}

func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		got <- c
	}()
	a, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	b = <-got
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	b.SetReadDeadline(time.Now().Add(time.Minute)) // a lost frame fails, not hangs
	return a, b
}

// newTestSender builds a sender on a with its respond loop running; the
// loop stops at cleanup.
func newTestSender(t *testing.T, a *net.TCPConn) (*sender, *atomic.Pointer[error]) {
	t.Helper()
	var failed atomic.Pointer[error]
	var raw *sys.Writer
	if rc, err := a.SyscallConn(); err == nil {
		raw = sys.NewWriter(rc)
	}
	s := newSender(a, raw, func(err error) { failed.CompareAndSwap(nil, &err) })
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { s.run(done) })
	t.Cleanup(func() {
		a.Close()
		s.close(errors.New("test over"))
		close(done)
		wg.Wait()
	})
	return s, &failed
}

// smallBuffers builds a sender whose socket buffers are small (32 KiB), so
// that a peer that does not read soon fills them; b is the peer's end.
func smallBuffers(t *testing.T) (s *sender, failed *atomic.Pointer[error], b *net.TCPConn) {
	t.Helper()
	a, b := tcpPair(t)
	a.SetWriteBuffer(32 << 10)
	b.SetReadBuffer(32 << 10)
	s, failed = newTestSender(t, a)
	return s, failed, b
}

// replyCorked makes frame i of writer 0, 64 KiB, a reply of the read loop
// between a cork and an uncork, with its payload pinned by p (nil: none).
func replyCorked(s *sender, i int, p *pins, last bool) {
	s.cork()
	hdr, payload := testFrame(0, i, 64<<10)
	res := transport.Resolved{}
	if p != nil {
		res = p.resolved(payload)
	}
	s.reply(hdr, payload, res, last)
	s.uncork()
}

// pins hands out pinned references to one region, as a Host's Resolve
// does, and counts the released ones.
type pins struct {
	h     mem.Handle
	taken atomic.Int64
}

// resolved is b, with a pin on its region.
func (p *pins) resolved(b []byte) transport.Resolved {
	if !p.h.Pin() {
		panic("pin refused")
	}
	p.taken.Add(1)
	return transport.Resolved{Mem: b, Region: &p.h}
}

// released is how many of the pins were released.
func (p *pins) released() int64 { return p.taken.Load() - p.h.Pins() }

// TestSenderOrder: frames from concurrent senders and from the read loop
// (small ones copied, large ones written in place) all arrive, whole, each
// sender's in its order.
func TestSenderOrder(t *testing.T) {
	a, b := tcpPair(t)
	s, failed := newTestSender(t, a)
	const writers, each = 6, 300
	sizes := []int{0, 10, 4 << 10, coalesceMax, coalesceMax + 1, 200 << 10}
	read := make(chan error, 1)
	go func() { read <- readFrames(b, (writers+1)*each) }()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				hdr, p := testFrame(w, i, sizes[(w+i)%len(sizes)])
				if err := s.send(hdr, p); err != nil {
					t.Errorf("send: %v", err)
					return
				}
				clear(p) // the sender may not read it after send returns
			}
		})
	}
	// Writer "writers" plays the read loop: corked replies, uncorked
	// between batches, some with pinned payloads.
	var pinned pins
	readLoopReplies(s, writers, each, func(i int) int { return sizes[i%len(sizes)] }, &pinned)
	wg.Wait()
	waitFrames(t, read, failed)
	waitUntil(t, func() bool { return pinned.released() == each }, "every reply released")
}

// TestSenderCork: nothing a corked sender queues is written before the read
// loop uncorks, and then all of it is.
func TestSenderCork(t *testing.T) {
	a, b := tcpPair(t)
	s, _ := newTestSender(t, a)
	s.cork()
	for i := range 10 {
		hdr, p := testFrame(0, i, 100)
		s.reply(hdr, p, transport.Resolved{}, false)
	}
	// Another goroutine's small send is queued behind the cork, too.
	hdr, p := testFrame(1, 0, 100)
	if err := s.send(hdr, p); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var one [1]byte
	if n, err := b.Read(one[:]); n != 0 || !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
		t.Fatalf("read %d bytes (%v) while the sender was corked", n, err)
	}
	b.SetReadDeadline(time.Now().Add(time.Minute))
	s.uncork()
	if err := readFrames(b, 11); err != nil {
		t.Fatal(err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestSenderReplyNeverBlocks: the read loop's replies return at once even
// when the peer reads nothing; the respond loop writes them once it does.
func TestSenderReplyNeverBlocks(t *testing.T) {
	s, _, b := smallBuffers(t)
	var pinned pins
	const n = 64 // 64 × 64 KiB: far more than both socket buffers hold
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range n {
			// Both ways: queued, and written at once as the last reply.
			replyCorked(s, i, &pinned, i%2 == 0)
		}
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("a reply blocked on a peer that does not read")
	}
	if pinned.released() == n {
		t.Fatal("every payload was released before the peer read anything")
	}
	if err := readFrames(b, n); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return pinned.released() == n }, "every reply released")
	// Every frame that was counted written was counted queued: a large
	// send waits on that count for its own frame.
	waitUntil(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.done > s.taken+uint64(len(s.q.segs)) {
			t.Fatalf("%d segments counted written, %d queued", s.done, s.taken+uint64(len(s.q.segs)))
		}
		return !s.writing && s.done == s.taken
	}, "the queue to drain")
}

// TestSenderBackpressure: small sends queue behind a writer stuck on a full
// socket without waiting, but only up to queueMax; past it a sender waits
// for the peer to read.
func TestSenderBackpressure(t *testing.T) {
	s, _, b := smallBuffers(t)
	// The respond loop gets stuck writing replies nobody reads.
	const stuck = 16
	for i := range stuck {
		replyCorked(s, i, nil, true)
	}
	const size = 8 << 10
	total := 2*queueMax/size + 64
	progress := make(chan int, total)
	go func() {
		for i := range total {
			hdr, p := testFrame(1, i, size)
			if err := s.send(hdr, p); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			progress <- i
		}
	}()
	// Let the sender run until it stops making progress.
	sent := -1
	for stalled := false; !stalled; {
		select {
		case sent = <-progress:
		case <-time.After(300 * time.Millisecond):
			stalled = true
		}
	}
	if sent+1 >= total {
		t.Fatalf("all %d sends of %d bytes returned with nobody reading: the queue is unbounded", total, size)
	}
	// What the sends queued is in s.q.buf (the stuck replies add only
	// their headers there: their payloads are written in place). The
	// writer may have taken an earlier part of it into the batch it is
	// stuck on, depending on how much the socket buffers took, so the
	// bound is on the queue, not on the sends that returned.
	s.mu.Lock()
	inQueue := len(s.q.buf)
	s.mu.Unlock()
	if inQueue < queueMax {
		t.Fatalf("sends waited with %d bytes queued: small sends should queue behind a stuck writer up to %d", inQueue, queueMax)
	}
	if limit := queueMax + size + testHdrLen + stuck*testHdrLen; inQueue > limit {
		t.Fatalf("%d bytes queued before a send waited (bound %d)", inQueue, limit)
	}
	if err := readFrames(b, stuck+total); err != nil {
		t.Fatal(err)
	}
}

// TestSenderClose: closing releases what is queued, and later sends fail
// with the reason.
func TestSenderClose(t *testing.T) {
	s, failed, _ := smallBuffers(t)
	var pinned pins
	const n = 32
	for i := range n {
		replyCorked(s, i, &pinned, i%2 == 0)
	}
	if pinned.released() == n {
		t.Fatal("every payload was released before anything was read or closed")
	}
	// As Endpoint.fail does: close the queue, then the connection, which
	// makes the respond loop's blocked write return.
	reason := errors.New("endpoint down")
	s.close(reason)
	s.nc.Close()
	waitUntil(t, func() bool { return pinned.released() == n }, "every queued reply released")
	hdr, p := testFrame(1, 0, 10)
	if err := s.send(hdr, p); !errors.Is(err, reason) {
		t.Fatalf("send after close: %v, want %v", err, reason)
	}
	_ = failed // a write error after the close may or may not be reported
}

// TestSenderWriteError: a send to a connection the peer reset fails, and the
// failure reaches onErr.
func TestSenderWriteError(t *testing.T) {
	a, b := tcpPair(t)
	b.SetLinger(0)
	b.Close() // RST
	s, failed := newTestSender(t, a)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		hdr, p := testFrame(0, i, 64<<10)
		err = s.send(hdr, p)
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("sends to a reset connection kept succeeding")
	}
	if failed.Load() == nil {
		t.Fatal("the write error was not reported")
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSenderAppend: frames encoded in place by concurrent sendAppend
// callers, some while the read loop holds the queue corked, all arrive
// whole and in each caller's order; a fill longer than its bound is
// refused, in the writer's buffer and in the queue alike, with nothing of
// it written.
func TestSenderAppend(t *testing.T) {
	a, b := tcpPair(t)
	s, failed := newTestSender(t, a)
	const writers, each = 4, 500
	sizes := []int{0, 10, 4 << 10, coalesceMax}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				n := sizes[(w+i)%len(sizes)]
				if i%50 == 7 {
					// One byte over the bound.
					err := s.sendAppend(&wire.Header{Type: wire.FrameSend}, n, func(b []byte) []byte {
						return append(b, make([]byte, n+1)...)
					})
					if !errors.Is(err, errAppendTooLong) {
						t.Errorf("fill over its bound: %v", err)
						return
					}
					refused.Add(1)
				}
				if w == 0 && i%3 == 0 {
					s.cork() // as the read loop does while it handles frames
				}
				_, p := testFrame(w, i, n)
				err := s.sendAppend(&wire.Header{Type: wire.FrameSend, ID: uint64(w)<<32 | uint64(i)}, n, func(b []byte) []byte {
					return append(b, p...)
				})
				if w == 0 && i%3 == 0 {
					s.uncork()
				}
				if err != nil {
					t.Errorf("sendAppend: %v", err)
					return
				}
			}
		})
	}
	next := make([]int, writers)
	var h wire.Header
	hdr := make([]byte, wire.FrameHeaderLen)
	for range writers * each {
		if _, err := io.ReadFull(b, hdr); err != nil {
			t.Fatal(err)
		}
		if err := wire.DecodeHeader(hdr, &h); err != nil {
			t.Fatal(err)
		}
		w, i := int(h.ID>>32), int(uint32(h.ID))
		if w >= writers || i != next[w] {
			t.Fatalf("writer %d: frame %d came where %d was due", w, i, next[w])
		}
		next[w]++
		got := make([]byte, h.Len)
		if _, err := io.ReadFull(b, got); err != nil {
			t.Fatal(err)
		}
		if _, exp := testFrame(w, i, len(got)); !bytes.Equal(got, exp) || len(got) != sizes[(w+i)%len(sizes)] {
			t.Fatalf("writer %d frame %d: payload of %d bytes differs", w, i, len(got))
		}
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("write failed: %v", *f)
	}
	if want := int64(writers * ((each + 42) / 50)); refused.Load() != want {
		t.Fatalf("%d fills over their bound refused, want %d", refused.Load(), want)
	}
}

// TestSenderFile: frames whose payloads go out by reference from a memfd
// (sendFile), mixed with small and large frames from other senders and with
// the read loop's corked replies, all arrive whole and each sender's in
// order. One sender's file cannot be sent from (a socket): its payloads go
// out as usual.
func TestSenderFile(t *testing.T) {
	a, b := tcpPair(t)
	s, failed := newTestSender(t, a)
	const each = 60
	sizes := []int{64 << 10, 100<<10 + 3, 1 << 20}
	// Writer 0's payloads lie in a memfd, each at its own place: the
	// kernel reads them until the peer has them.
	total := 0
	for i := range each {
		total += sizes[i%len(sizes)]
	}
	mr, err := mem.NewRegion(mem.RegionOptions{Size: total, Shared: true, Name: "sender-file-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	if mr.FD() < 0 {
		t.Fatal("a shared region has no memfd")
	}
	// Writer 1's "file" is a socket, which sendfile refuses.
	c, _ := tcpPair(t)
	sock, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	read := make(chan error, 1)
	go func() { read <- readFrames(b, 5*each) }()
	var wg sync.WaitGroup
	wg.Go(func() {
		off := 0
		for i := range each {
			// A small frame first, which may wait in the queue: the
			// file frame after it must not overtake it.
			hdr, p := testFrame(0, 2*i, 10)
			if err := s.send(hdr, p); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			hdr, p = testFrame(0, 2*i+1, sizes[i%len(sizes)])
			dst := mr.Bytes()[off : off+len(p)]
			copy(dst, p)
			if err := s.sendFile(hdr, dst, mr.FD(), int64(off)); err != nil {
				t.Errorf("sendFile: %v", err)
				return
			}
			off += len(p)
		}
	})
	wg.Go(func() {
		for i := range each {
			hdr, p := testFrame(1, i, sizes[i%len(sizes)])
			if err := s.sendFile(hdr, p, int(sock.Fd()), 0); err != nil {
				t.Errorf("sendFile from a socket: %v", err)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range each {
			hdr, p := testFrame(2, i, []int{10, 4 << 10, 200 << 10}[i%3])
			if err := s.send(hdr, p); err != nil {
				t.Errorf("send: %v", err)
				return
			}
		}
	})
	readLoopReplies(s, 3, each, func(i int) int { return []int{0, 100, 64 << 10}[i%3] }, nil)
	wg.Wait()
	waitFrames(t, read, failed)
}

// readLoopReplies plays the read loop: n replies of writer w, size(i)
// bytes each, corked in batches of four (the last of each batch marked
// last), with their payloads pinned by p when it is not nil.
func readLoopReplies(s *sender, w, n int, size func(i int) int, p *pins) {
	for i := range n {
		if i%4 == 0 {
			s.cork()
		}
		hdr, payload := testFrame(w, i, size(i))
		res := transport.Resolved{}
		if p != nil {
			res = p.resolved(payload)
		}
		s.reply(hdr, payload, res, i%4 == 3)
		if i%4 == 3 || i == n-1 {
			s.uncork()
		}
	}
}

// waitFrames waits for the reader's verdict, and checks that no write
// failed.
func waitFrames(t *testing.T, read <-chan error, failed *atomic.Pointer[error]) {
	t.Helper()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("frames did not all arrive")
	}
	if f := failed.Load(); f != nil {
		t.Fatalf("write failed: %v", *f)
	}
}

// TestSenderFileAfterQueued: a frame sent from a file goes out after the
// frames queued before it, also those the corked read loop holds back.
func TestSenderFileAfterQueued(t *testing.T) {
	a, b := tcpPair(t)
	s, failed := newTestSender(t, a)
	mr, err := mem.NewRegion(mem.RegionOptions{Size: 256 << 10, Shared: true, Name: "sender-file-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	read := make(chan error, 1)
	go func() { read <- readFrames(b, 3) }()
	s.cork() // as the read loop does while it handles frames
	for i := range 2 {
		hdr, p := testFrame(0, i, 100)
		if err := s.send(hdr, p); err != nil {
			t.Fatal(err)
		}
	}
	hdr, p := testFrame(0, 2, 256<<10)
	copy(mr.Bytes(), p)
	if err := s.sendFile(hdr, mr.Bytes(), mr.FD(), 0); err != nil {
		t.Fatal(err)
	}
	s.uncork()
	waitFrames(t, read, failed)
}

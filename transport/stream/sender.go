package stream

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// A connection's outgoing side is one ordered queue of frames and at most
// one goroutine at a time, the writer, writing it to the socket. Frames
// queued while a write is under way go out together in the next one, so
// concurrent senders share system calls: with 16 callers on one connection a
// writev carries several requests, and the peer reads them with one read.
//
// The read loop corks the queue while it handles frames it has already read
// (cork, uncork): its replies, and anything other goroutines queue meanwhile,
// wait until it is about to read the socket again and then leave in one
// non-blocking writev. This is how an event-loop server answers a batch of
// requests with one write (Redis writes its replies before it waits in
// epoll). The read loop never blocks on a write: what the socket does not
// take at once is handed to the respond loop, which writes it blocking.
//
// A sender that finds nothing queued and no write under way (one poster at
// a time, the common case at depth 1) writes its frame itself, from where
// it is. Otherwise a small frame is copied into the queue's buffer and its
// sender returns at once; a sender of a large payload waits until it is
// written, as its memory is the caller's. Replies the read loop makes from
// registered memory (a READ's data) are written in place and released once
// written; the last reply of a read goes out at once when nothing is queued.
// The read loop keeps the cork on while the goroutines it woke run only
// when one read completed several operations or delivered several messages
// (conn.handedOver), so that a lone caller's next request is not held back.
//
// Why by hand: no library batches writes on a net.Conn this way (bufio
// needs an explicit Flush and a single writer; gRPC's loopy writer is
// internal to its transport).

// coalesceMax is the largest payload copied into the queue; larger ones are
// written from where they are.
const coalesceMax = 16 << 10

// queueMax bounds the bytes copied into the queue behind a writer that cannot
// write: a sender that is not the read loop waits while more are queued.
const queueMax = 1 << 20

// rawWriteMax bounds the bytes of one raw (non-blocking, P-holding) write
// system call; larger frames go through the connection's own writev.
const rawWriteMax = 64 << 10

// writerRounds is how many batches a sending goroutine writes for the others
// before it hands the writer's role to the respond loop: it has its own work
// to get back to.
const writerRounds = 4

// seg is one piece of the queue: bytes of the queue's buffer, or a payload
// written from where it is.
type seg struct {
	off, n int    // the bytes buf[off:off+n], when ext is nil
	ext    []byte // a payload written in place
	res    transport.Resolved
}

// batch is the part of the queue a writer took.
type batch struct {
	buf  []byte
	segs []seg
	iov  [][]byte // what remains to write: pieces of buf and ext payloads
	iova [][]byte // iov's storage, kept for reuse
}

// sender is a connection's outgoing queue.
type sender struct {
	nc    net.Conn
	raw   *sys.Writer     // nil: no non-blocking writes
	onErr func(err error) // a write failed: take the stream down
	kick  chan struct{}   // wakes the respond loop
	mu    sync.Mutex      // guards everything below
	cond  sync.Cond       // a batch was written, or the queue closed
	q     batch           // queued, not yet taken by a writer
	spare batch           // the last written batch, for reuse
	wb    batch           // the batch being written, owned by the writer
	riov  [][]byte        // the writer's scratch for a raw writev
	// whdr is the writer's copy of a frame header it writes in place (a
	// lone poster's, a reply's): the callers' headers stay on their
	// stacks, and writing a frame allocates nothing.
	whdr  [wire.FrameHeaderLen]byte
	abuf  []byte // the writer's buffer for a frame sendAppend writes at once
	carry *batch // a partly written batch handed to the respond loop
	taken uint64 // segments taken by writers so far
	done  uint64 // segments written (or dropped) so far
	// writing is true while some goroutine holds the writer's role.
	writing bool
	corked  bool  // the read loop is handling frames it already read
	handoff bool  // the writer's role waits for the respond loop
	err     error // the queue is closed: every later send fails with err
}

func newSender(nc net.Conn, raw *sys.Writer, onErr func(error)) *sender {
	s := &sender{nc: nc, raw: raw, onErr: onErr, kick: make(chan struct{}, 1)}
	s.cond.L = &s.mu
	return s
}

// queued reports how many segments were ever queued; s.mu is held.
func (s *sender) queued() uint64 { return s.taken + uint64(len(s.q.segs)) }

// add queues hdr and payload as one frame; s.mu is held. The header is
// copied; so is the payload unless inPlace, when it is queued where it is
// with res, released once it is written.
func (s *sender) add(hdr, payload []byte, res transport.Resolved, inPlace bool) {
	off := len(s.q.buf)
	s.q.buf = append(s.q.buf, hdr...)
	if !inPlace || len(payload) == 0 {
		s.q.buf = append(s.q.buf, payload...)
		s.q.segs = append(s.q.segs, seg{off: off, n: len(s.q.buf) - off})
		res.Release()
		return
	}
	s.q.segs = append(s.q.segs, seg{off: off, n: len(hdr)}, seg{ext: payload, res: res})
}

// lockRoom locks s.mu once the queue has room: a sender waits while the
// writer is stuck on a full socket with queueMax bytes queued, so as not to
// pile up (the corked read loop never waits). On error s.mu is not held.
func (s *sender) lockRoom() error {
	s.mu.Lock()
	for s.err == nil && s.writing && !s.corked && len(s.q.buf) >= queueMax {
		s.cond.Wait()
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	return nil
}

// hold takes the writer's role, when it is free and nothing is queued, for
// a poster about to send several small frames: send then queues each of
// them instead of writing it, and release writes them together, in as few
// system calls as they fit. It reports whether it took the role.
func (s *sender) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writing || s.corked || s.handoff || s.err != nil || len(s.q.segs) > 0 {
		return false
	}
	s.writing = true
	return true
}

// release writes what was queued while the role was held, and gives up the
// role as writeQueued's writer does.
func (s *sender) release() error { return s.write(writerRounds, true) }

// writeAlone writes one frame, blocking, for a poster that took the
// writer's role with nothing queued, then what others queued meanwhile.
func (s *sender) writeAlone(hdr, payload []byte) error {
	if err := s.writeFrame(hdr, payload); err != nil {
		s.finish(&batch{}, err)
		return err
	}
	return s.write(writerRounds, true)
}

// send writes a frame from a goroutine other than the read loop, or queues
// it, and returns once payload may be reused: when nothing is queued and no
// write is under way it writes the frame itself, from where it is; else a
// small frame is copied into the queue for the writer at work, and a large
// one waits until it is written. It reports the write error only when it
// wrote.
func (s *sender) send(hdr, payload []byte) error {
	if err := s.lockRoom(); err != nil {
		return err
	}
	if !s.writing && !s.corked && len(s.q.segs) == 0 {
		// The common case of one poster at a time: no copy, no batch.
		s.writing = true
		s.mu.Unlock()
		return s.writeAlone(s.whdr[:copy(s.whdr[:], hdr)], payload)
	}
	small := len(payload) <= coalesceMax
	s.add(hdr, payload, transport.Resolved{}, !small)
	if small {
		return s.writeQueued()
	}
	mine := s.queued()
	for s.done < mine {
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if !s.writing {
			s.writing = true
			s.mu.Unlock()
			if err := s.write(-1, false); err != nil {
				return err
			}
			s.mu.Lock()
			continue
		}
		s.cond.Wait()
	}
	s.mu.Unlock()
	return nil
}

// sendFile writes a frame whose payload lies in the memfd fd at offset
// off, with the payload sent by reference (sendfile), and returns once it is
// written. The kernel then holds the payload's pages, not a copy of them,
// until the peer has read them: only a WRITE, which completes once the
// target answers, may be sent so. The sender takes the writer's role (when
// it is free) and writes what was queued before the frame first, to keep
// frames in order.
func (s *sender) sendFile(hdr, payload []byte, fd int, off int64) error {
	s.mu.Lock()
	for s.err == nil && s.writing {
		s.cond.Wait()
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.writing = true
	var b *batch
	if len(s.q.segs) > 0 {
		b = s.take()
	}
	s.mu.Unlock()
	if b != nil {
		err := s.writeAll(b)
		s.finish(b, err)
		if err != nil {
			return err
		}
	}
	if err := s.writeFile(hdr, payload, fd, off); err != nil {
		s.finish(&batch{}, err)
		return err
	}
	return s.write(writerRounds, true)
}

// writeFile writes hdr and then payload, which lies in the memfd fd at off,
// blocking; the caller holds the writer's role. Where the file cannot be
// sent from, the payload is written as usual.
func (s *sender) writeFile(hdr, payload []byte, fd int, off int64) error {
	if s.raw == nil {
		return s.writeFrame(hdr, payload)
	}
	if err := s.raw.SendMore(hdr); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			return s.writeFrame(hdr, payload)
		}
		return err
	}
	err := s.raw.SendFile(fd, off, len(payload))
	if errors.Is(err, errors.ErrUnsupported) {
		_, err = s.nc.Write(payload)
	}
	return err
}

// errAppendTooLong: an AppendSend's fill appended more than it said.
var errAppendTooLong = errors.New("message longer than its stated maximum")

// sendAppend queues a frame whose payload fill appends to the queue's
// buffer: the message is encoded where it is written from, with no copy.
// Like send, it writes the queue itself when no writer is at work and the
// read loop does not hold the queue corked; it never waits for a write
// under way.
func (s *sender) sendAppend(h *wire.Header, max int, fill func([]byte) []byte) error {
	if err := s.lockRoom(); err != nil {
		return err
	}
	if !s.writing && !s.corked && len(s.q.segs) == 0 && s.raw != nil {
		// One poster at a time, the common case: the frame is encoded
		// into the writer's own buffer and written from there at once.
		s.writing = true
		s.mu.Unlock()
		b := fill(slices.Grow(s.abuf[:0], wire.FrameHeaderLen+max)[:wire.FrameHeaderLen])
		s.abuf = b[:0]
		if n := len(b) - wire.FrameHeaderLen; n > max {
			s.write(writerRounds, true) // gives the role back
			return fmt.Errorf("%w: %d bytes, at most %d", errAppendTooLong, n, max)
		}
		h.Len = uint64(len(b) - wire.FrameHeaderLen)
		h.Put(b)
		return s.writeAlone(b, nil)
	}
	off := len(s.q.buf)
	s.q.buf = slices.Grow(s.q.buf, wire.FrameHeaderLen+max)
	s.q.buf = fill(s.q.buf[:off+wire.FrameHeaderLen])
	n := len(s.q.buf) - off - wire.FrameHeaderLen
	if n > max {
		s.q.buf = s.q.buf[:off]
		s.mu.Unlock()
		return fmt.Errorf("%w: %d bytes, at most %d", errAppendTooLong, n, max)
	}
	h.Len = uint64(n)
	h.Put(s.q.buf[off:])
	s.q.segs = append(s.q.segs, seg{off: off, n: len(s.q.buf) - off})
	return s.writeQueued()
}

// writeQueued follows a frame just queued, with s.mu held, which it
// unlocks: the writer at work or the corked read loop will write it;
// otherwise the caller takes the writer's role and writes the queue.
func (s *sender) writeQueued() error {
	if s.writing || s.corked {
		s.mu.Unlock()
		return nil
	}
	s.writing = true
	s.mu.Unlock()
	return s.write(writerRounds, true)
}

// reply queues a frame from the read loop, which never waits: res is
// released once payload is written. last tells that the read loop has
// nothing more buffered to handle: with nothing queued and no write under
// way, the frame then goes out at once, in one non-blocking attempt, as it
// would at the next read anyway.
func (s *sender) reply(hdr, payload []byte, res transport.Resolved, last bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		res.Release()
		return
	}
	if last && !s.writing && len(s.q.segs) == 0 && s.raw != nil && len(payload) <= rawWriteMax {
		s.writing = true
		s.mu.Unlock()
		s.replyNow(s.whdr[:copy(s.whdr[:], hdr)], payload, res)
		return
	}
	// In place: a READ's data stays in its pinned region until written.
	s.add(hdr, payload, res, true)
	corked := s.corked
	s.mu.Unlock()
	if !corked {
		s.tryFlush()
	}
}

// replyNow writes a reply with one non-blocking attempt and hands what the
// socket did not take to the respond loop; the caller holds the writer's
// role, and hdr is s.whdr.
func (s *sender) replyNow(hdr, payload []byte, res transport.Resolved) {
	n, err := s.raw.TryWritev(hdr, payload)
	if err != nil {
		res.Release()
		s.finish(&batch{}, err)
		return
	}
	if n == len(hdr)+len(payload) {
		res.Release()
		s.mu.Lock()
		if s.err != nil || len(s.q.segs) == 0 || s.corked {
			s.writing = false
			s.mu.Unlock()
			s.cond.Broadcast()
			return
		}
		s.mu.Unlock()
		s.tryFlushHeld() // queued meanwhile, with the role still held
		return
	}
	// The socket is full: the rest of the frame goes first, from the
	// respond loop (a rare path, so a batch of its own).
	b := &s.wb
	if n < len(hdr) {
		b.buf = append([]byte(nil), hdr[n:]...)
		b.segs = []seg{{n: len(b.buf)}, {ext: payload, res: res}}
		b.iov = [][]byte{b.buf, payload}
	} else {
		b.segs = []seg{{ext: payload[n-len(hdr):], res: res}}
		b.iov = [][]byte{payload[n-len(hdr):]}
	}
	s.mu.Lock()
	s.taken += uint64(len(b.segs)) // finish counts them done
	s.mu.Unlock()
	s.handOff(b)
}

// cork holds the queue while the read loop handles what it read.
func (s *sender) cork() {
	s.mu.Lock()
	s.corked = true
	s.mu.Unlock()
}

// uncork releases the queue before the read loop reads the socket again,
// writing what is queued without blocking.
func (s *sender) uncork() {
	s.mu.Lock()
	s.corked = false
	s.flushLocked()
}

// tryFlush writes the queue with non-blocking system calls if no writer is
// at work; what the socket does not take goes to the respond loop.
func (s *sender) tryFlush() {
	s.mu.Lock()
	s.flushLocked()
}

// flushLocked is tryFlush with s.mu held; it unlocks s.mu.
func (s *sender) flushLocked() {
	if s.writing || s.err != nil || len(s.q.segs) == 0 {
		s.mu.Unlock()
		return
	}
	s.writing = true
	s.mu.Unlock()
	s.tryFlushHeld()
}

// tryFlushHeld is tryFlush for a caller that holds the writer's role.
func (s *sender) tryFlushHeld() {
	s.mu.Lock()
	b := s.take()
	s.mu.Unlock()
	for {
		if s.raw != nil {
			// One attempt: the read loop leaves bulk data to the
			// respond loop and goes back to reading.
			if err := s.writeNow(b, true); err != nil {
				s.finish(b, err)
				return
			}
		}
		if len(b.iov) > 0 {
			// The socket is full (or takes no raw writes): the respond
			// loop finishes this batch, blocking.
			s.handOff(b)
			return
		}
		s.finish(b, nil)
		s.mu.Lock()
		if s.err != nil || len(s.q.segs) == 0 || s.corked {
			s.writing = false
			s.mu.Unlock()
			return
		}
		b = s.take()
		s.mu.Unlock()
	}
}

// handOff passes the writer's role, and the partly written batch b, to the
// respond loop.
func (s *sender) handOff(b *batch) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		s.finish(b, nil) // closed meanwhile: drop it
		return
	}
	s.carry = b
	s.handoff = true
	s.mu.Unlock()
	s.wake()
}

// take hands the queue to the writer, who owns s.wb; s.mu is held.
func (s *sender) take() *batch {
	b := &s.wb
	b.buf, b.segs = s.q.buf, s.q.segs
	s.q.buf, s.q.segs = s.spare.buf[:0], s.spare.segs[:0]
	s.spare = batch{}
	s.taken += uint64(len(b.segs))
	b.iov = b.iova[:0]
	start, end := -1, -1
	for _, sg := range b.segs {
		if sg.ext != nil {
			if start >= 0 {
				b.iov = append(b.iov, b.buf[start:end])
				start = -1
			}
			b.iov = append(b.iov, sg.ext)
			continue
		}
		if start < 0 {
			start = sg.off
		}
		end = sg.off + sg.n
	}
	if start >= 0 {
		b.iov = append(b.iov, b.buf[start:end])
	}
	b.iova = b.iov
	return b
}

// writeFrame writes hdr (s.whdr) and payload, blocking; the caller holds the
// writer's role.
func (s *sender) writeFrame(hdr, payload []byte) error {
	n := 0
	if s.raw != nil && len(payload) <= rawWriteMax {
		var err error
		if n, err = s.raw.TryWritev(hdr, payload); err != nil {
			return err
		}
	}
	var err error
	switch {
	case n < len(hdr):
		bufs := net.Buffers{hdr[n:], payload}
		_, err = bufs.WriteTo(s.nc)
	case n < len(hdr)+len(payload):
		_, err = s.nc.Write(payload[n-len(hdr):])
	}
	return err
}

// writeNow writes as much of b as the socket takes at once (with once, in
// one system call of at most rawWriteMax bytes), dropping what was written
// from b.iov.
func (s *sender) writeNow(b *batch, once bool) error {
	for len(b.iov) > 0 {
		// At most rawWriteMax bytes per raw call (internal/sys).
		s.riov = s.riov[:0]
		left := rawWriteMax
		for _, x := range b.iov[:min(len(b.iov), sys.MaxIovecs)] {
			if left == 0 {
				break
			}
			x = x[:min(len(x), left)]
			s.riov = append(s.riov, x)
			left -= len(x)
		}
		n, err := s.raw.TryWritev(s.riov...)
		clear(s.riov)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		b.iov = advance(b.iov, n)
		if once || n < rawWriteMax-left {
			return nil // the socket is full
		}
	}
	return nil
}

// writeAll writes the rest of b, blocking.
func (s *sender) writeAll(b *batch) error {
	if s.raw != nil {
		// One raw attempt: bulk data goes through the connection's
		// writev, a few large system calls rather than many of 64 KiB.
		if err := s.writeNow(b, true); err != nil {
			return err
		}
	}
	for len(b.iov) > 0 {
		// WriteTo writes all of bufs or fails; it consumes bufs (and
		// clears the entries of b.iov it wrote).
		k := min(len(b.iov), sys.MaxIovecs)
		bufs := net.Buffers(b.iov[:k])
		if _, err := bufs.WriteTo(s.nc); err != nil {
			return err
		}
		b.iov = b.iov[k:]
	}
	return nil
}

// advance drops the first n bytes of iov.
func advance(iov [][]byte, n int) [][]byte {
	for n > 0 && len(iov) > 0 {
		if n < len(iov[0]) {
			iov[0] = iov[0][n:]
			return iov
		}
		n -= len(iov[0])
		iov[0] = nil
		iov = iov[1:]
	}
	return iov
}

// finish releases a written batch, keeps its buffers for reuse and wakes
// the goroutines waiting for it. On error the queue closes.
func (s *sender) finish(b *batch, err error) {
	for i := range b.segs {
		b.segs[i].res.Release()
		b.segs[i] = seg{}
	}
	clear(b.iova)
	s.mu.Lock()
	s.done += uint64(len(b.segs))
	if cap(b.buf) > 0 && cap(b.buf) <= 4*queueMax {
		s.spare = batch{buf: b.buf[:0], segs: b.segs[:0]}
	}
	b.buf, b.segs, b.iov = nil, nil, nil
	if err != nil {
		s.writing = false
	}
	s.mu.Unlock()
	s.cond.Broadcast()
	if err != nil {
		s.onErr(err)
		s.close(err)
	}
}

// write is the writer's loop, blocking: it writes what is queued until the
// queue is empty (or, with atCork, until the read loop corks it: the read
// loop then writes what comes next), for at most rounds batches (-1: no
// limit), and then gives up the writer's role, to the respond loop if work
// remains.
func (s *sender) write(rounds int, atCork bool) error {
	for i := 0; ; i++ {
		s.mu.Lock()
		if s.err != nil || len(s.q.segs) == 0 || (atCork && s.corked) {
			s.writing = false
			err := s.err
			s.mu.Unlock()
			s.cond.Broadcast()
			return err
		}
		if rounds >= 0 && i >= rounds {
			s.handoff = true
			s.mu.Unlock()
			s.wake()
			return nil
		}
		b := s.take()
		s.mu.Unlock()
		err := s.writeAll(b)
		s.finish(b, err)
		if err != nil {
			return err
		}
	}
}

func (s *sender) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the respond loop: it takes the writer's role when it is handed
// over, until done is closed.
func (s *sender) run(done <-chan struct{}) {
	for {
		select {
		case <-s.kick:
		case <-done:
			return
		}
		s.mu.Lock()
		h, b := s.handoff, s.carry
		s.handoff, s.carry = false, nil
		s.mu.Unlock()
		if !h {
			continue
		}
		if b != nil {
			err := s.writeAll(b)
			s.finish(b, err)
			if err != nil {
				continue
			}
		}
		_ = s.write(-1, false) // errors take the stream down (finish)
	}
}

// close fails the queue with err: later sends return it, and queued frames
// are dropped and their memory released. The connection must be closed too,
// so that a writer blocked on it returns.
func (s *sender) close(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	q := s.q
	s.q = batch{}
	s.taken += uint64(len(q.segs))
	s.done += uint64(len(q.segs))
	carry := s.carry // the respond loop may have stopped: nobody will write it
	s.carry = nil
	s.mu.Unlock()
	for i := range q.segs {
		q.segs[i].res.Release()
	}
	if carry != nil {
		s.finish(carry, nil)
	}
	s.cond.Broadcast()
}

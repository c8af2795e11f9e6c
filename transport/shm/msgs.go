package shm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport"
)

// msgs is an endpoint's path for messages (SENDs, AppendSend) and the
// notifications of its write-with-notify: a ring in each direction
// (ring.go) and an eventfd doorbell on each side. Every message and
// notification of a connection with msgs takes it, so they keep their
// order; receive credits still come back over the control stream (they
// are batched), and the stream still tells when the peer is gone.
//
// The reader goroutine (serve) delivers what the peer published, frees it
// and flushes what waited here for space in the peer's ring. When it finds
// nothing it keeps looking for Params.PollSpin, yielding between looks,
// then raises its sleep word and waits in the Go poller for its doorbell,
// which the writer rings only when it sees the word raised: a message to a
// busy reader costs no system call.
type msgs struct {
	in, out ring // in: this side's memfd, the peer writes; out: the peer's
	ownBell int  // this side's doorbell, rung by the peer
	peerBel int  // the peer's doorbell, taken with pidfd_getfd
	wait    *sys.EventFD
	maxMsg  int
	depth   int
	spin    time.Duration
	noSpin  int // waits left that sleep at once (the reader's own)
	misses  int // the waits that sleep at once after a fruitless spin
	// handedEpoch is sys.Handed's state.
	handedEpoch int64

	inFlight atomic.Int64  // messages delivered and not yet consumed
	received atomic.Uint64 // entries read (Progress)

	wmu      sync.Mutex
	tail     uint64
	credits  int
	sendWait []*transport.Op // SENDs waiting for credit
	overflow []pending       // entries waiting for space in out, in order
	err      error           // set once down: what new operations fail with
	unmapped bool            // close released the rings and the doorbells
	// The stream's Done and Err, set once it is built: the stream is
	// down a moment before its OnDown (goDown) runs.
	streamDone <-chan struct{}
	streamErr  func() error

	overflowN atomic.Int32
	// failFn takes the connection down (the stream's Fail), set once the
	// stream is built; countFn counts a message's bytes as sent.
	failFn  atomic.Pointer[func(error)]
	countFn func(op *transport.Op)
	stop    atomic.Bool // Close: exit at once
	failing atomic.Bool // the reader found the ring malformed
	down    atomic.Bool // the stream is down: deliver what is published, then exit
	done    chan struct{}
	closed  sync.Once
}

type pending struct {
	kind byte
	b    []byte
}

// ringInfo is what each side sends the other at connect, on the control
// connection before the stream starts: its inbound ring's memfd and its
// doorbell, as numbers in its process, and the ring's data size. fd -1:
// no ring.
const ringInfoLen = 16

var ringMagic = [4]byte{'x', 's', 'r', '1'}

// setupMsgs builds the rings over c, the connection the stream is about to
// take: each side sends its info, takes and maps the peer's, and sends one
// byte (1: ready); both use the rings only when both are ready. nil, nil:
// no rings (max_message too large for one, or either side failed to set
// up its part), the stream carries the messages. An error is one of the
// connection.
func setupMsgs(ctx context.Context, c net.Conn, pidfd int, p transport.Params) (*msgs, error) {
	size := ringSize(p.MaxMessage)
	var memfd, bell = -1, -1
	var inMem []byte
	cleanup := func() {
		if inMem != nil {
			sys.Munmap(inMem)
		}
		if bell >= 0 {
			sys.Close(bell)
		}
	}
	defer func() {
		if memfd >= 0 {
			sys.Close(memfd) // the peer has taken it, or never will
		}
	}()
	if size != 0 {
		var err error
		memfd, inMem, bell, err = newInbound(size)
		if err != nil {
			memfd, bell, inMem = -1, -1, nil
			p.Logger.Debug("shm: message ring unavailable, messages take the control stream", "err", err)
		}
	}
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	defer c.SetDeadline(time.Time{})
	var info [ringInfoLen]byte
	copy(info[:], ringMagic[:])
	fd, efd := int32(-1), int32(-1)
	if inMem != nil {
		fd, efd = int32(memfd), int32(bell)
	}
	binary.LittleEndian.PutUint32(info[4:], uint32(fd))
	binary.LittleEndian.PutUint32(info[8:], uint32(efd))
	binary.LittleEndian.PutUint32(info[12:], uint32(size))
	if _, err := c.Write(info[:]); err != nil {
		cleanup()
		return nil, fmt.Errorf("shm: message ring setup: %w", err)
	}
	var peer [ringInfoLen]byte
	if _, err := io.ReadFull(c, peer[:]); err != nil {
		cleanup()
		return nil, fmt.Errorf("shm: message ring setup: %w", err)
	}
	if [4]byte(peer[:4]) != ringMagic {
		cleanup()
		return nil, fmt.Errorf("shm: message ring setup: %w: the peer sent %x, not a ring's description", transport.ErrProtocol, peer[:4])
	}
	var outMem []byte
	peerBell := -1
	if inMem != nil {
		var err error
		outMem, peerBell, err = takeOutbound(pidfd, peer, size)
		if err != nil {
			p.Logger.Debug("shm: message ring unavailable, messages take the control stream", "err", err)
		}
	}
	ready := [1]byte{0}
	if outMem != nil {
		ready[0] = 1
	}
	var peerReady [1]byte
	_, err := c.Write(ready[:])
	if err == nil {
		_, err = io.ReadFull(c, peerReady[:])
	}
	if err != nil || ready[0] != 1 || peerReady[0] != 1 {
		if outMem != nil {
			sys.Munmap(outMem)
			sys.Close(peerBell)
		}
		cleanup()
		if err != nil {
			return nil, fmt.Errorf("shm: message ring setup: %w", err)
		}
		return nil, nil
	}
	w, err := sys.NewEventFD(bell)
	if err != nil {
		sys.Munmap(outMem)
		sys.Close(peerBell)
		cleanup()
		p.Logger.Debug("shm: message ring doorbell", "err", err)
		return nil, fmt.Errorf("shm: message ring doorbell: %w", err)
	}
	spin := p.PollSpin
	if spin < 0 {
		spin = 0
	}
	// Only a peer in this process answers with this process's CPUs,
	// which a fruitless spin takes from it: only then do the waits after
	// one sleep at once.
	misses := 0
	if p.Remote.PID == os.Getpid() {
		misses = spinMisses
	}
	return &msgs{
		in: newRing(inMem), out: newRing(outMem), ownBell: bell, peerBel: peerBell, wait: w,
		maxMsg: p.MaxMessage, depth: p.RecvDepth, credits: p.RecvDepth, spin: spin, misses: misses,
		done: make(chan struct{}),
	}, nil
}

// newInbound creates this side's inbound ring and doorbell.
func newInbound(size uint64) (memfd int, m []byte, bell int, err error) {
	memfd, err = sys.MemfdCreate("xfer-shm-ring", false)
	if err != nil {
		return -1, nil, -1, err
	}
	if err = sys.Ftruncate(memfd, int64(ringHeader+size)); err == nil {
		// The peer takes the memfd: it must not shrink it under this
		// side's reader.
		err = sys.SealSize(memfd)
	}
	if err == nil {
		m, err = sys.MmapShared(memfd, int(ringHeader+size))
	}
	if err == nil {
		bell, err = sys.Eventfd()
		if err != nil {
			sys.Munmap(m)
		}
	}
	if err != nil {
		sys.Close(memfd)
		return -1, nil, -1, err
	}
	return memfd, m, bell, nil
}

// takeOutbound maps the peer's inbound ring, which this side writes, and
// takes its doorbell.
func takeOutbound(pidfd int, info [ringInfoLen]byte, size uint64) ([]byte, int, error) {
	fd := int32(binary.LittleEndian.Uint32(info[4:]))
	efd := int32(binary.LittleEndian.Uint32(info[8:]))
	psize := uint64(binary.LittleEndian.Uint32(info[12:]))
	if fd < 0 || efd < 0 {
		return nil, -1, fmt.Errorf("the peer has no ring")
	}
	if psize != size {
		return nil, -1, fmt.Errorf("the peer's ring holds %d bytes, this side's %d", psize, size)
	}
	mfd, err := sys.PidfdGetfd(pidfd, int(fd))
	if err != nil {
		return nil, -1, err
	}
	defer sys.Close(mfd)
	// The peer's own memfd: were it shorter than said, a store past its
	// end would fault.
	if n, err := sys.FileSize(mfd); err != nil || uint64(n) < ringHeader+size {
		return nil, -1, fmt.Errorf("the peer's ring memfd holds %d bytes, not %d (%v)", n, ringHeader+size, err)
	}
	m, err := sys.MmapShared(mfd, int(ringHeader+size))
	if err != nil {
		return nil, -1, err
	}
	bell, err := sys.PidfdGetfd(pidfd, int(efd))
	if err != nil {
		sys.Munmap(m)
		return nil, -1, err
	}
	return m, bell, nil
}

// start runs the reader goroutine, which delivers to e.
func (m *msgs) start(e *Endpoint) { go m.serve(e) }

// close stops the reader goroutine, waits for it and releases the rings.
// The stream is down by then (its OnDown rang the doorbell).
// Idempotent.
func (m *msgs) close() {
	m.closed.Do(func() {
		m.stop.Store(true)
		sys.EventfdRing(m.ownBell)
		<-m.done
		m.wait.Close()
		// Under wmu: writers, Progress (the watchdog's) and whoever rings
		// a doorbell from another goroutine (ring, wake) check unmapped
		// before they touch the rings or the doorbells. A doorbell rung
		// after its descriptor closed would write 8 bytes into whatever
		// file took the number since.
		m.wmu.Lock()
		m.unmapped = true
		if m.err == nil {
			m.err = net.ErrClosed
		}
		sys.Close(m.ownBell)
		sys.Close(m.peerBel)
		sys.Munmap(m.in.mem)
		sys.Munmap(m.out.mem)
		m.wmu.Unlock()
	})
}

// peerHead is how far the peer has read this side's outbound ring (0
// once the rings are released).
func (m *msgs) peerHead() uint64 {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.unmapped {
		return 0
	}
	return atomic.LoadUint64(m.out.u64(offHead))
}

// beforeDown is the stream's BeforeDown: it waits, up to a second, until
// the reader has delivered what the peer published before the stream
// failed, so that a peer's last messages and notifications arrive before
// its loss is told, as on a stream. It returns at once on Close.
func (m *msgs) beforeDown() {
	if m.stop.Load() || m.failing.Load() {
		return
	}
	tail := atomic.LoadUint64(m.in.u64(offTail))
	m.wake()
	deadline := time.Now().Add(time.Second)
	for int64(atomic.LoadUint64(m.in.u64(offHead))-tail) < 0 {
		select {
		case <-m.done:
			return
		default:
		}
		if m.stop.Load() || m.failing.Load() || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// downErr returns the error new operations fail with, nil while up;
// m.wmu is held.
func (m *msgs) downErr() error {
	if m.err == nil && m.streamDone != nil {
		select {
		case <-m.streamDone:
			m.err = m.streamErr()
		default:
		}
	}
	return m.err
}

// goDown is the stream's OnDown: new operations fail with err, those
// waiting for credit complete with it, and the reader delivers what is
// published and exits.
func (m *msgs) goDown(err error) {
	m.wmu.Lock()
	if m.err == nil {
		m.err = err
	}
	ops := m.sendWait
	m.sendWait = nil
	m.overflow = nil
	m.overflowN.Store(0)
	m.wmu.Unlock()
	for _, op := range ops {
		complete(op, err)
	}
	m.down.Store(true)
	m.wake()
}

// wake rings this side's doorbell, unless close released it; m.wmu is
// not held.
func (m *msgs) wake() {
	m.wmu.Lock()
	if !m.unmapped {
		sys.EventfdRing(m.ownBell)
	}
	m.wmu.Unlock()
}

// ring wakes the peer's reader if it sleeps, unless close released the
// rings; m.wmu is not held.
func (m *msgs) ring() {
	m.wmu.Lock()
	if !m.unmapped {
		w := m.out.u32(offSleep)
		if atomic.LoadUint32(w) != 0 && atomic.CompareAndSwapUint32(w, 1, 0) {
			sys.EventfdRing(m.peerBel)
		}
	}
	m.wmu.Unlock()
}

// send posts an OpSend: into the ring when a credit is left, else it
// waits for one. It reports whether op completed at once, successfully
// (the caller counts its bytes).
func (m *msgs) send(op *transport.Op) (sent bool) {
	if len(op.Local) > m.maxMsg {
		complete(op, fmt.Errorf("shm send of %d bytes: %w (max_message is %d)", len(op.Local), transport.ErrTooLarge, m.maxMsg))
		return false
	}
	m.wmu.Lock()
	if err := m.downErr(); err != nil {
		m.wmu.Unlock()
		complete(op, err)
		return false
	}
	if m.credits == 0 || len(m.sendWait) > 0 {
		m.sendWait = append(m.sendWait, op)
		m.wmu.Unlock()
		return false
	}
	m.credits--
	err := m.put(kindSend, op.Local)
	m.wmu.Unlock()
	m.after(err)
	complete(op, err)
	return err == nil
}

// notify puts a write-with-notify's notification into the ring.
func (m *msgs) notify(n transport.Notification) error {
	var b [notifyLen]byte
	binary.LittleEndian.PutUint32(b[0:], n.Value)
	binary.LittleEndian.PutUint32(b[4:], n.Region)
	binary.LittleEndian.PutUint64(b[8:], n.Addr)
	binary.LittleEndian.PutUint64(b[16:], n.Len)
	m.wmu.Lock()
	err := m.downErr()
	if err == nil {
		err = m.put(kindNotify, b[:])
	}
	m.wmu.Unlock()
	m.after(err)
	return err
}

// appendSend implements transport.Appender on the ring: the message is
// encoded straight into the peer's ring.
func (m *msgs) appendSend(max int, fill func(b []byte) []byte) (bool, error) {
	if max > m.maxMsg {
		return false, nil
	}
	m.wmu.Lock()
	if err := m.downErr(); err != nil {
		m.wmu.Unlock()
		return false, err
	}
	if m.credits == 0 || len(m.sendWait) > 0 || len(m.overflow) > 0 {
		m.wmu.Unlock()
		return false, nil
	}
	room, at, ok, err := m.out.reserve(m.tail, max)
	if err != nil || !ok {
		m.wmu.Unlock()
		m.after(err)
		return false, err
	}
	b := fill(room[:0])
	if len(b) > max || (len(b) > 0 && &b[0] != &room[0]) {
		m.wmu.Unlock()
		return false, fmt.Errorf("shm send: the message is longer than the %d bytes announced", max)
	}
	m.tail = m.out.commit(m.tail, at, kindSend, len(b))
	m.credits--
	m.wmu.Unlock()
	m.ring()
	return true, nil
}

// put writes one entry into the peer's ring, or, while that lacks space
// or entries wait already, queues a copy; m.wmu is held. An error is a
// malformed ring (the peer's head out of range).
func (m *msgs) put(kind byte, b []byte) error {
	if len(m.overflow) == 0 {
		room, at, ok, err := m.out.reserve(m.tail, len(b))
		if err != nil {
			return err
		}
		if ok {
			copy(room, b)
			m.tail = m.out.commit(m.tail, at, kind, len(b))
			return nil
		}
	}
	m.overflow = append(m.overflow, pending{kind, append([]byte(nil), b...)})
	if m.overflowN.Add(1) == 1 {
		// The reader goroutine flushes it, as the peer frees space:
		// wake it in case it sleeps.
		sys.EventfdRing(m.ownBell)
	}
	return nil
}

// after rings the peer after a put, or takes the connection down when
// the put found the ring malformed.
func (m *msgs) after(err error) {
	if err != nil {
		m.fail(err)
		return
	}
	m.ring()
}

// fail takes the connection down for a malformed ring.
func (m *msgs) fail(err error) {
	m.failing.Store(true)
	if f := m.failFn.Load(); f != nil {
		(*f)(fmt.Errorf("%w: %w", transport.ErrProtocol, err))
	}
}

// onCredit is the stream's OnCredit: the peer consumed n messages.
func (m *msgs) onCredit(n int) {
	m.wmu.Lock()
	m.credits += n
	var err error
	var done []*transport.Op
	for m.credits > 0 && len(m.sendWait) > 0 && m.err == nil && err == nil {
		op := m.sendWait[0]
		m.sendWait = m.sendWait[1:]
		m.credits--
		err = m.put(kindSend, op.Local)
		done = append(done, op)
	}
	m.wmu.Unlock()
	m.after(err)
	for _, op := range done {
		if err == nil {
			m.sentBytes(op)
		}
		complete(op, err)
	}
}

// flush moves what waits into the peer's ring while it has space; it
// reports whether it moved anything.
func (m *msgs) flush() bool {
	if m.overflowN.Load() == 0 {
		return false
	}
	m.wmu.Lock()
	moved := 0
	var err error
	for moved < len(m.overflow) {
		p := m.overflow[moved]
		var room []byte
		var at uint64
		var ok bool
		room, at, ok, err = m.out.reserve(m.tail, len(p.b))
		if err != nil || !ok {
			break
		}
		copy(room, p.b)
		m.tail = m.out.commit(m.tail, at, p.kind, len(p.b))
		moved++
	}
	m.overflow = m.overflow[moved:]
	if len(m.overflow) == 0 {
		m.overflow = nil
	}
	m.overflowN.Store(int32(len(m.overflow)))
	m.wmu.Unlock()
	if moved > 0 || err != nil {
		m.after(err)
	}
	return moved > 0
}

// cancel takes back an OpSend still waiting for credit.
func (m *msgs) cancel(op *transport.Op) bool {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	for i, w := range m.sendWait {
		if w == op {
			m.sendWait = append(m.sendWait[:i], m.sendWait[i+1:]...)
			return true
		}
	}
	return false
}

// pending counts what waits for credit or space (Progress).
func (m *msgs) waiting() int {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	return len(m.sendWait) + len(m.overflow)
}

// serve is the reader goroutine.
func (m *msgs) serve(e *Endpoint) {
	defer close(m.done)
	var head uint64
	for !m.stop.Load() {
		n, err := m.deliver(e, &head)
		if err != nil {
			m.fail(err)
			return
		}
		flushed := m.flush() // also while the peer keeps sending
		if n > 0 {
			// The goroutine the delivery woke, if any, runs first,
			// unless the process is busy (sys.Handed): then the
			// next look finds nothing and the reader sleeps, and the
			// poller serves it in turn with the other connections.
			if !sys.Handed(&m.handedEpoch) {
				runtime.Gosched()
			}
			continue
		}
		if flushed {
			continue
		}
		if m.down.Load() {
			return // delivered what the peer published before it went
		}
		m.idle(head)
	}
}

// deliver hands what the peer published to the host, at most a batch,
// and frees it. It returns how many entries it read.
func (m *msgs) deliver(e *Endpoint, head *uint64) (int, error) {
	const batch = 64
	n := 0
	for ; n < batch && !m.stop.Load(); n++ {
		kind, payload, size, err := m.in.next(*head, m.maxMsg)
		if err != nil {
			return n, err
		}
		if size == 0 {
			break
		}
		switch kind {
		case kindSend:
			if m.inFlight.Add(1) > int64(m.depth) {
				return n, fmt.Errorf("peer sent past its receive credits")
			}
			e.host.Deliver(e, payload)
		case kindNotify:
			e.host.Notify(e, transport.Notification{
				Value:  binary.LittleEndian.Uint32(payload[0:]),
				Region: binary.LittleEndian.Uint32(payload[4:]),
				Addr:   binary.LittleEndian.Uint64(payload[8:]),
				Len:    binary.LittleEndian.Uint64(payload[16:]),
			})
		}
		*head += size
		m.in.consume(*head)
	}
	if n > 0 {
		m.received.Add(uint64(n))
		// The writer may wait for the space just freed.
		w := m.in.u32(offWantSpace)
		if atomic.LoadUint32(w) != 0 && atomic.CompareAndSwapUint32(w, 1, 0) {
			sys.EventfdRing(m.peerBel)
		}
	}
	return n, nil
}

// ready reports whether serve has something to do.
func (m *msgs) ready(head uint64) bool {
	return m.in.published(head) || m.stop.Load() || m.down.Load() || m.flushable()
}

func (m *msgs) flushable() bool {
	if m.overflowN.Load() == 0 {
		return false
	}
	m.wmu.Lock()
	ok := len(m.overflow) > 0 && m.out.hasSpace(m.tail, len(m.overflow[0].b))
	m.wmu.Unlock()
	return ok
}

// idle waits for something to do: a spin of m.spin, yielding between
// looks, then the doorbell.
func (m *msgs) idle(head uint64) {
	switch {
	case m.spin <= 0:
	case m.noSpin > 0:
		m.noSpin--
	case sys.Busy():
		// Many connections deliver: a spin would keep the poller
		// from the readers that sleep (sys.Handed).
	case spinners.Add(1) > maxSpinners:
		spinners.Add(-1)
	default:
		// The clock is read every 16 looks: a look costs less.
		until := time.Now().Add(m.spin)
		for i := 1; !m.ready(head) && (i%16 != 0 || time.Now().Before(until)); i++ {
			runtime.Gosched()
		}
		spinners.Add(-1)
		if m.ready(head) {
			return
		}
		// A spin that found nothing only took the CPU from the work
		// that answers, and kept the Go poller from waking a goroutine
		// that sleeps (its Ps were never idle): sleep at once the next
		// spinMisses times.
		m.noSpin = m.misses
	}
	sleep := m.in.u32(offSleep)
	atomic.StoreUint32(sleep, 1)
	if m.overflowN.Load() > 0 {
		atomic.StoreUint32(m.out.u32(offWantSpace), 1)
	}
	// The writer stores its tail, then looks at the sleep word; this side
	// stores the word, then looks at the tail: one of the two sees the
	// other's store.
	if !m.ready(head) {
		m.wait.Drain()
	}
	atomic.StoreUint32(sleep, 0)
}

// spinMisses is how many waits after a spin that found nothing sleep at
// once, when the peer is in this process. Measured on 2026-11-28 on two
// vCPUs (tools/bench/connector.sh, and A/Bs of tools/bench/kv.sh): the 4
// KiB put+get in one process had p50 8.3 µs with 16, 8.7-10.5 with 4, and
// 31-49 µs with none (a spinning reader keeps the P the answering
// goroutine needs); between two processes the back-off only cost (kv's
// single-client ops at half speed with 16, every wait after a 1 MiB
// value's copy sleeping), so there it is none.
const spinMisses = 4

// At most maxSpinners ring readers of the process spin at once (half the
// Ps, none with one), so that spinning never takes every CPU from the work
// that answers, nor keeps every P from the poller.
var (
	spinners    atomic.Int32
	maxSpinners = int32(runtime.GOMAXPROCS(0) / 2)
)

// sentBytes counts a message sent.
func (m *msgs) sentBytes(op *transport.Op) {
	if f := m.countFn; f != nil {
		f(op)
	}
}

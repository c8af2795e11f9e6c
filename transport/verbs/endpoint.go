package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stream"
)

// wr_id layout. Bit 63 marks receives; bits 44-62 are the endpoint's
// reference on its CQ (see cq.go). Send-side ids: bits 0-15 the pending
// slot, 16-31 the slot's generation, 32-43 how many send-queue entries this
// signalled request retires (itself and the unsignalled ones posted before
// it on its QP). Receive ids have the ring slot in the low 32 bits.
const (
	slotBits = 16
	genBits  = 16
	slotMask = 1<<slotBits - 1
	genMask  = 1<<genBits - 1
	countMax = 1<<12 - 1
	recvFlag = uint64(1) << 63
	maxSlots = 1 << slotBits
	maxPerOp = 1 << 12 // slices of one operation
	// immOnly marks the buffer-less receives of the QPs after the first,
	// which only ever take write-with-notify immediates.
	immOnly = uint32(1) << 30
)

func (e *Endpoint) sendID(slot, gen uint32, count int) uint64 {
	return e.ref | uint64(slot) | uint64(gen&genMask)<<slotBits | uint64(count)<<(slotBits+genBits)
}

// Endpoint is an rdma endpoint: RC queue pairs for the data path, and a
// stream on the handshaken TCP connection for control (region attach with
// rkeys, revocation, SEND credits, liveness). It implements
// transport.Appender with send buffers of its own, registered in its ring
// (append.go).
type Endpoint struct {
	s    *stream.Stream // the control stream, set once the QPs are connected
	host transport.Host
	dev  *device
	cfg  Config

	// cqg is the device CQ the endpoint's QPs complete on, and ref its
	// reference there, in every wr_id (bits 44-62).
	cqg   *cqGroup
	ref   uint64
	qps   []*sendQueue
	byQPN map[uint32]int
	// life guards the QPs' existence: every use of a QP after setup holds
	// it for reading; closeQPs takes it for writing and marks them released,
	// so that no post can touch a destroyed QP.
	life     sync.RWMutex
	released bool

	// With use_srq, one shared receive queue feeds all the QPs: the ring
	// then has depth buffers per QP, all posted to it, and any of them may
	// take a message, an immediate or a notification.
	srq *ibv.SRQ

	// Receive ring: RecvDepth buffers of MaxMessage bytes, registered;
	// after them the notifications' scratch slots, the fence byte and
	// AppendSend's send buffers.
	ring     *mem.Region
	ringMR   *ibv.MR
	slotSize int
	freeMu   sync.Mutex
	free     []uint32 // ring slots whose message was delivered, to repost
	owed     int      // consumed messages whose credit waits for a slot to repost

	mu      sync.Mutex
	down    error // the control stream's failure, while completions drain
	pend    []pending
	freeIDs []uint32
	att     map[uint32]*remote
	revokes uint64
	err     error
	sent    []wire.RegionKey // rkeys sent with the QP numbers, rechecked once up

	// rdma_cm: the endpoint's event channel and IDs (listener included).
	cmCh  *rdmacm.Channel
	cmIDs []*rdmacm.ID

	// SEND flow control: credits are the peer's free receive buffers; the
	// peer returns them over the control stream as its messages are
	// consumed (iWARP has no RNR retry, so a SEND without a posted receive
	// would break the connection).
	cmu      sync.Mutex
	credits  int
	sendWait []*transport.Op

	appendState // AppendSend's send buffers, in the ring (append.go)

	// noImm: the device has no RDMA WRITE with immediate (iWARP). A
	// write-with-notify is then its WRITEs followed, on the same QP, by a
	// small SEND carrying the notification, which RC delivers after the data.
	noImm bool

	// The move to the control stream when the queue pairs fail (see
	// pathdown.go): onFailover is Params.OnFailover (nil: fail instead);
	// path is pathRDMA, pathMoving or pathStream; held is what was
	// posted while moving, in order, guarded by pmu.
	onFailover func(from, to string, cause error)
	recvOut    atomic.Int64 // receives posted and not yet handled
	path       atomic.Uint32
	pmu        sync.Mutex
	held       []*transport.Op

	depth      int
	ringSlots  int
	maxMessage int
	rr         atomic.Uint32
	// completions counts the work completions handled (Progress): one
	// atomic add beside the completion's own work.
	completions atomic.Uint64
	done        chan struct{}
	once        sync.Once
	freed       sync.Once
}

var (
	_ transport.Endpoint   = (*Endpoint)(nil)
	_ transport.Progresser = (*Endpoint)(nil)
)

// Progress implements transport.Progresser: the work completions handled
// and the control stream's progress; and the operations posted and not
// yet completed (those waiting for SEND credit among them).
func (e *Endpoint) Progress() (moved uint64, pending int) {
	moved = e.completions.Load()
	if e.s != nil {
		m, sp := e.s.Progress()
		moved += m
		if e.onStream() {
			pending += sp // the operations the stream carries now
		}
	}
	e.pmu.Lock()
	pending += len(e.held)
	e.pmu.Unlock()
	e.mu.Lock()
	pending += len(e.pend) - len(e.freeIDs)
	e.mu.Unlock()
	e.cmu.Lock()
	pending += len(e.sendWait)
	e.cmu.Unlock()
	return moved, pending
}

// pending is one posted operation waiting for its signalled completions.
type pending struct {
	op        *transport.Op
	gen       uint32
	remaining int
	err       error
}

// sendQueue is one QP and its send-queue accounting: posted entries are
// counted against the queue depth and retired by signalled completions.
//
// Posters serialise on mu, which they hold across the post. Completions
// never take it: on SoftRoCE a request completes inside the very
// ibv_post_send that posts it, and a poller that found the completion then
// waited for the poster's unlock, and had to be woken by it (a futex wake
// and a thread switch on every operation). The send-queue accounting
// (inflight) is atomic instead; a poster that finds the queue full waits on
// cond, under wmu, and completions signal it only while someone waits.
type sendQueue struct {
	qp       *ibv.QP
	mu       sync.Mutex // serialises posters; guards wrs and note
	wmu      sync.Mutex // cond's lock
	cond     *sync.Cond
	waiters  atomic.Int32 // posters waiting for room
	inflight atomic.Int64 // requests posted and not yet completed
	max      int
	dead     atomic.Bool
	wrs      []ibv.SendWR
	note     [noteLen]byte // the inline notification message (noImm)
}

func newSendQueue(qp *ibv.QP, max int) *sendQueue {
	q := &sendQueue{qp: qp, max: max, wrs: make([]ibv.SendWR, 0, max)}
	q.cond = sync.NewCond(&q.wmu)
	return q
}

// reserve waits until n more requests fit the send queue and counts them
// in flight; q.mu is held. It reports false when the queue is dead.
func (q *sendQueue) reserve(n int) bool {
	if q.inflight.Load()+int64(n) > int64(q.max) && !q.dead.Load() {
		q.wmu.Lock()
		q.waiters.Add(1)
		for q.inflight.Load()+int64(n) > int64(q.max) && !q.dead.Load() {
			q.cond.Wait()
		}
		q.waiters.Add(-1)
		q.wmu.Unlock()
	}
	if q.dead.Load() {
		return false
	}
	q.inflight.Add(int64(n))
	return true
}

// completed takes n requests out of flight and wakes a waiting poster.
func (q *sendQueue) completed(n int) {
	q.inflight.Add(int64(-n))
	if q.waiters.Load() > 0 {
		q.wmu.Lock()
		q.cond.Broadcast()
		q.wmu.Unlock()
	}
}

// kill marks the queue dead and wakes every waiting poster.
func (q *sendQueue) kill() {
	q.dead.Store(true)
	q.wmu.Lock()
	q.cond.Broadcast()
	q.wmu.Unlock()
}

// remote is a peer region this side may address.
type remote struct {
	base, n uint64
	key     uint64
	rkey    uint32
	rights  transport.Access
}

func (e *Endpoint) failed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// fail takes the data path down: every pending operation completes with
// err, and the poller stops. The control endpoint goes down with it.
func (e *Endpoint) fail(err error) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = err
	ops, errs := e.takePending()
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
	e.mu.Unlock()
	for _, q := range e.qps {
		q.kill()
	}
	e.cmu.Lock()
	waiting := e.sendWait
	e.sendWait = nil
	e.cmu.Unlock()
	e.pmu.Lock()
	waiting = append(waiting, e.held...)
	e.held = nil
	e.pmu.Unlock()
	for i, op := range ops {
		complete(op, errs[i])
	}
	for _, op := range waiting {
		complete(op, err)
	}
	e.once.Do(func() { close(e.done) })
	go e.s.Close()
}

// takePending takes every pending operation out of its slot, with the
// error noted for it (nil: none); e.mu is held.
func (e *Endpoint) takePending() (ops []*transport.Op, errs []error) {
	for i := range e.pend {
		p := &e.pend[i]
		if p.op != nil {
			ops = append(ops, p.op)
			errs = append(errs, p.err)
			p.op = nil
			e.freeIDs = append(e.freeIDs, uint32(i))
		}
	}
	return ops, errs
}

func complete(op *transport.Op, err error) {
	op.Err = err
	op.Done.OpDone(op)
}

// Done is closed when the endpoint is down.
func (e *Endpoint) Done() <-chan struct{} { return e.done }

// Err says why the endpoint is down.
func (e *Endpoint) Err() error {
	if err := e.failed(); err != nil {
		return err
	}
	return e.s.Err()
}

// Transport is "rdma", or "tcp" once the endpoint moved to its control
// stream.
func (e *Endpoint) Transport() string {
	if e.onStream() {
		return "tcp"
	}
	return "rdma"
}

// Close fails outstanding operations and releases the QPs, CQ, channel and
// receive ring.
func (e *Endpoint) Close() error {
	e.fail(&transport.LinkError{Peer: "rdma peer", Local: true})
	e.s.Close()
	e.release()
	e.dev.leave(e)
	return nil
}

// release frees the endpoint's verbs resources and receive ring, once: on
// Close, or when its device is removed. Its QPs go first, then it leaves
// its CQ (after which no completion reaches it), then the ring goes.
func (e *Endpoint) release() {
	e.freed.Do(func() {
		e.closeQPs()
		e.leaveCQ()
		e.ringMR.Close()
		e.ring.Close()
	})
}

// closeQPs destroys the QPs, and the rdma_cm IDs and channel.
func (e *Endpoint) closeQPs() {
	e.life.Lock()
	defer e.life.Unlock()
	if e.released {
		return
	}
	e.released = true
	if len(e.cmIDs) > 0 {
		for _, q := range e.qps {
			if !e.dev.iwarp {
				q.qp.ToError() // as rdma_disconnect does
			}
		}
		for _, id := range e.cmIDs {
			id.Disconnect()
		}
	}
	for _, q := range e.qps {
		q.qp.Close()
	}
	for _, id := range e.cmIDs {
		id.Close()
	}
	e.cmIDs = nil
	e.cmCh.Close()
	e.cmCh = nil
	e.srq.Close()
	e.srq = nil
}

// Post submits operations.
//
// A Post with wait of one operation that completes with one signalled
// request (a WRITE or READ of at most a slice, a message) polls the CQ
// itself, in the caller's goroutine, until that operation completes or syncPollMax passes,
// when no other goroutine is polling the CQ at that moment: a caller that
// waits for the operation (Peer.Write) then finds it done when Post returns,
// without the poller goroutine's wake-up and hand-off.
//
// A Post of several WRITEs and READs posts each queue pair's requests of
// all of them as one chain (one ibv_post_send per queue pair, up to
// groupMax requests), as a Post of one large operation does, rather than
// a chain per operation and queue pair: see postBatch.
func (e *Endpoint) Post(ops []*transport.Op, wait bool) {
	if e.path.Load() != pathRDMA {
		e.postStream(ops, wait)
		return
	}
	var b *postBatch
	if len(ops) > 1 {
		b = e.newBatch()
		defer e.endBatch(b)
	}
	for _, op := range ops {
		var slot, gen uint32
		var posted bool
		switch op.Kind {
		case transport.OpWrite, transport.OpWriteImm, transport.OpRead:
			slot, gen, posted = e.postRDMA(op, b)
		case transport.OpSend:
			e.flush(b) // messages leave after the requests posted before them
			slot, gen, posted = e.postSend(op)
		default:
			complete(op, fmt.Errorf("rdma: operation kind %d: %w", op.Kind, errors.ErrUnsupported))
		}
		if posted && len(ops) == 1 && wait {
			e.pollFor(slot, gen)
		}
	}
}

// postBatch gathers the work requests of one Post of several operations,
// per queue pair, to post each queue pair's as one chain.
//
// On SoftRoCE (rxe) ibv_post_send does the device's work in the calling
// thread: it sends what the new requests allow, and processes whatever
// acknowledgements and packets arrive meanwhile, before it returns. A value
// written as 16 pieces posted by 8 calls (its 4 MiB chunks, each two
// slices on each of two QPs) kept each queue pair waiting for its next
// requests while the calls for the other ran, and, measured under
// emulation, drew several times as many retransmission timeouts as the
// same bytes posted as one operation (two calls): the 16 MiB Get ran at
// 0.65-0.8x of one 16 MiB WRITE. Chained, the Post makes one call per
// queue pair, as the single operation does. Hardware NICs gain too: one
// doorbell per chain instead of one per piece.
type postBatch struct {
	wrs [][]ibv.SendWR // by queue pair index
}

var batchPool sync.Pool

// rdmaPosts counts the ibv_post_send calls that posted WRITEs and READs
// (tests only look at it).
var rdmaPosts atomic.Uint64

func (e *Endpoint) newBatch() *postBatch {
	b, _ := batchPool.Get().(*postBatch)
	if b == nil {
		b = &postBatch{}
	}
	for len(b.wrs) < len(e.qps) {
		b.wrs = append(b.wrs, nil)
	}
	return b
}

// endBatch posts what b holds and recycles it.
func (e *Endpoint) endBatch(b *postBatch) {
	e.flush(b)
	batchPool.Put(b)
}

// flush posts every queue pair's requests gathered in b (nil: none).
func (e *Endpoint) flush(b *postBatch) {
	if b == nil {
		return
	}
	for qi := range b.wrs {
		e.flushQP(b, qi)
	}
}

// flushQP posts queue pair qi's requests gathered in b as one chain; a
// failure fails the endpoint, which completes their operations.
func (e *Endpoint) flushQP(b *postBatch, qi int) {
	wrs := b.wrs[qi]
	if len(wrs) == 0 {
		return
	}
	b.wrs[qi] = wrs[:0]
	q := e.qps[qi]
	q.mu.Lock()
	if !q.reserve(len(wrs)) {
		q.mu.Unlock()
		// The endpoint failed, or is moving to its stream, which takes
		// the operations of wrs.
		if err := e.failed(); err != nil {
			e.fail(&transport.LinkError{Peer: "rdma peer", Cause: err})
		}
		return
	}
	err := e.postChain(q, wrs)
	q.mu.Unlock()
	if err != nil {
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
	}
}

// postChain posts the chain wrs on q, whose mutex the caller holds, unless
// the endpoint's verbs resources are released already.
func (e *Endpoint) postChain(q *sendQueue, wrs []ibv.SendWR) error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.released {
		return errReleased
	}
	_, err := q.qp.PostSend(wrs)
	e.cqg.posts.Add(1)
	rdmaPosts.Add(1)
	return err
}

// slotDone reports whether the operation of slot and gen has completed.
func (e *Endpoint) slotDone(slot, gen uint32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := &e.pend[slot]
	return p.op == nil || p.gen != gen
}

// alloc takes a pending slot for op.
func (e *Endpoint) alloc(op *transport.Op, signalled int) (uint32, uint32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return 0, 0, e.err
	}
	if e.path.Load() != pathRDMA {
		return 0, 0, errMoving
	}
	var slot uint32
	if n := len(e.freeIDs); n > 0 {
		slot = e.freeIDs[n-1]
		e.freeIDs = e.freeIDs[:n-1]
	} else {
		if len(e.pend) >= maxSlots {
			return 0, 0, fmt.Errorf("rdma: %d operations in flight: %w", maxSlots, transport.ErrTooLarge)
		}
		e.pend = append(e.pend, pending{})
		slot = uint32(len(e.pend) - 1)
	}
	p := &e.pend[slot]
	p.gen = (p.gen + 1) & genMask
	p.op, p.remaining, p.err = op, signalled, nil
	return slot, p.gen, nil
}

// retire counts one signalled completion (or failure) of slot.
func (e *Endpoint) retire(slot, gen uint32, err error) {
	e.mu.Lock()
	if int(slot) >= len(e.pend) {
		e.mu.Unlock()
		return
	}
	p := &e.pend[slot]
	if p.op == nil || p.gen != gen {
		e.mu.Unlock()
		return
	}
	if err != nil && p.err == nil {
		p.err = err
	}
	p.remaining--
	if p.remaining > 0 && err == nil {
		e.mu.Unlock()
		return
	}
	op, perr := p.op, p.err
	p.op = nil
	e.freeIDs = append(e.freeIDs, slot)
	e.mu.Unlock()
	complete(op, perr)
}

// noteErr records err as the failure of the pending operation in slot (of
// generation gen), without completing it.
func (e *Endpoint) noteErr(slot, gen uint32, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if int(slot) < len(e.pend) {
		if p := &e.pend[slot]; p.op != nil && p.gen == gen && p.err == nil {
			p.err = err
		}
	}
}

// Cancel cannot take back posted work requests: it returns false, and the
// operation completes (or fails with its QP) by itself. Once the endpoint
// moved to its control stream, the stream's Cancel answers, and an
// operation held while it moved is taken back.
func (e *Endpoint) Cancel(op *transport.Op) bool {
	if !e.onStream() {
		return false
	}
	if takeOut(&e.pmu, &e.held, op) || takeOut(&e.cmu, &e.sendWait, op) {
		return true
	}
	return e.s.Cancel(op)
}

// takeOut removes op from *list, under mu, and reports whether it was there.
func takeOut(mu *sync.Mutex, list *[]*transport.Op, op *transport.Op) bool {
	mu.Lock()
	defer mu.Unlock()
	for i, h := range *list {
		if h == op {
			*list = append((*list)[:i], (*list)[i+1:]...)
			return true
		}
	}
	return false
}

// postRDMA posts op; it returns its pending slot when it was posted as one
// signalled request.
func (e *Endpoint) postRDMA(op *transport.Op, b *postBatch) (slot, gen uint32, one bool) {
	want := transport.AccessWrite
	if op.Kind == transport.OpRead {
		want = transport.AccessRead
	}
	n := uint64(len(op.Local))
	if n == 0 && op.Kind != transport.OpWriteImm {
		complete(op, nil)
		return 0, 0, false
	}
	a, err := e.attachment(op.Remote.Region, op.Remote.Key, want)
	if err != nil {
		e.reject(op, err)
		return 0, 0, false
	}
	addr := op.Remote.Addr
	switch {
	case a.key^op.Remote.Key != 0:
		complete(op, &transport.AccessError{Kind: transport.WrongKey, Want: want, Region: op.Remote.Region, Addr: addr, Len: n})
		return 0, 0, false
	case addr < a.base || addr-a.base > a.n || n > a.n-(addr-a.base):
		complete(op, &transport.AccessError{Kind: transport.OutOfRange, Want: want, Region: op.Remote.Region, Addr: addr, Len: n})
		return 0, 0, false
	}
	var lkey uint32
	if n > 0 {
		mr, err := e.dev.mr(op.Region)
		if err != nil {
			e.reject(op, err) // the device may be gone: see pathdown.go
			return 0, 0, false
		}
		lkey = mr.LKey
	}
	slice := uint64(e.cfg.SliceSize)
	if op.Kind == transport.OpWriteImm && !e.noImm {
		// One WRITE_WITH_IMM: the target learns the length from its
		// completion (byte_len), which counts that request's bytes only.
		maxMsg := uint64(e.dev.port.MaxMsgSize)
		if m := testMaxMsg.Load(); m != 0 {
			maxMsg = uint64(m)
		}
		if maxMsg == 0 {
			maxMsg = 1 << 31 // the port did not say: the usual limit
		}
		if n > maxMsg {
			complete(op, fmt.Errorf("rdma write-with-notify of %d bytes: %w (%s carries at most %d bytes per message)", n, transport.ErrTooLarge, e.dev.info.Name, maxMsg))
			return 0, 0, false
		}
		slice = max(n, 1)
	}
	slices := int((n + slice - 1) / slice)
	if slices == 0 {
		slices = 1
	}
	if slices > maxPerOp {
		complete(op, fmt.Errorf("rdma %s of %d bytes: %w (at most %d slices of %d)", op.Kind, n, transport.ErrTooLarge, maxPerOp, slice))
		return 0, 0, false
	}
	// A write-with-notify stays on one QP so that its data lands before the
	// immediate that announces it (RC executes a QP's requests in order).
	// Other operations spread their slices over the QPs.
	nq := len(e.qps)
	first := int(e.rr.Add(1)) % nq
	note := op.Kind == transport.OpWriteImm && e.noImm
	if op.Kind == transport.OpWriteImm || slices == 1 {
		nq = 1
		if op.Kind == transport.OpWriteImm && len(e.qps) > 1 {
			first = 1 + first%(len(e.qps)-1)
		}
		if note {
			first = len(e.qps) - 1 // notifications as messages go to a notify-only QP
		}
	}
	perQ := make([]int, 0, 8) // slices per used QP
	for i := 0; i < min(nq, slices); i++ {
		perQ = append(perQ, slices/nq+btoi(i < slices%nq))
	}
	signalled := 0
	for _, k := range perQ {
		signalled += (k + e.groupMax() - 1) / e.groupMax()
	}
	if note && perQ[len(perQ)-1]%e.groupMax() == 0 {
		signalled++ // the notification needs a group of its own
	}
	slot, gen, err = e.alloc(op, signalled)
	if err != nil {
		e.reject(op, err)
		return 0, 0, false
	}
	off := uint64(0)
	fence := e.noImm && op.Kind != transport.OpRead && n > 0
	if note {
		// The notification's inline message lives in its queue pair's
		// buffer until posted: it posts at once, after what the batch
		// holds.
		e.flush(b)
		b = nil
	}
	for i, k := range perQ {
		qi := (first + i) % len(e.qps)
		q := e.qps[qi]
		last := i == len(perQ)-1
		for k > 0 || (last && note) {
			g := min(k, e.groupMax())
			withNote := last && note && (k-g == 0) && g < e.groupMax()
			if k == 0 {
				withNote = true // the notification alone
			}
			if b != nil {
				if len(b.wrs[qi])+g+btoi(fence) > e.groupMax() {
					e.flushQP(b, qi)
				}
				b.wrs[qi] = e.appendGroup(b.wrs[qi], op, slot, gen, g, false, fence, &off, lkey, a.rkey, addr, n, slice)
				if fence {
					b.wrs[qi] = append(b.wrs[qi], e.fenceWR(slot, gen, g+1, addr, a.rkey))
				}
			} else if err := e.postGroup(q, op, slot, gen, g, withNote, &off, lkey, a.rkey, addr, n, slice); err != nil {
				e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
				return 0, 0, false
			}
			k -= g
			if withNote {
				break
			}
		}
	}
	return slot, gen, signalled == 1
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// groupMax is how many requests may go unsignalled in a row.
func (e *Endpoint) groupMax() int { return max(1, min(countMax, e.cfg.MaxSendWR/2)) }

// postGroup posts g consecutive slices of op on q, the last signalled, in
// one call.
func (e *Endpoint) postGroup(q *sendQueue, op *transport.Op, slot, gen uint32, g int, note bool, off *uint64, lkey, rkey uint32, addr, n, slice uint64) error {
	// On iWARP a WRITE completes once it is handed to TCP, not once it is
	// in the peer's memory. A zero-length READ after it on the same QP
	// returns only when the peer has placed everything before it: that READ
	// is the group's signalled request, so the operation completes when its
	// data is in place, as on RoCE and InfiniBand.
	fence := e.noImm && op.Kind != transport.OpRead && n > 0
	total := g + btoi(note) + btoi(fence)
	q.mu.Lock()
	if !q.reserve(total) {
		q.mu.Unlock()
		return e.failed()
	}
	wrs := e.appendGroup(q.wrs[:0], op, slot, gen, g, note, fence, off, lkey, rkey, addr, n, slice)
	if note {
		encodeNote(q.note[:], op.Imm, op.Remote.Region, addr, n)
		w := ibv.SendWR{Op: ibv.OpSend, Flags: ibv.FlagInline, ID: e.ref,
			SGE: ibv.SGE{Addr: uint64(uintptr(unsafe.Pointer(&q.note[0]))), Len: noteLen}}
		if !fence {
			w.Flags |= ibv.FlagSignaled
			w.ID = e.sendID(slot, gen, total)
		}
		wrs = append(wrs, w)
	}
	if fence {
		wrs = append(wrs, e.fenceWR(slot, gen, total, addr, rkey))
	}
	err := e.postChain(q, wrs)
	q.wrs = wrs[:0]
	q.mu.Unlock()
	return err
}

// fenceWR is the zero-effect READ that ends a group of count requests on
// iWARP: one byte, into the ring's fence byte (siw refuses a READ without a
// local buffer); its value is never looked at.
func (e *Endpoint) fenceWR(slot, gen uint32, count int, addr uint64, rkey uint32) ibv.SendWR {
	return ibv.SendWR{Op: ibv.OpRead, Flags: ibv.FlagSignaled, RemoteAddr: addr, RKey: rkey, ID: e.sendID(slot, gen, count),
		SGE: ibv.SGE{Addr: uint64(e.ring.Addr()) + uint64(e.fenceOff()), Len: 1, LKey: e.ringMR.LKey}}
}

// appendGroup appends the requests of g consecutive slices of op to wrs,
// the last signalled unless a notification or fence follows them.
func (e *Endpoint) appendGroup(wrs []ibv.SendWR, op *transport.Op, slot, gen uint32, g int, note, fence bool, off *uint64, lkey, rkey uint32, addr, n, slice uint64) []ibv.SendWR {
	for i := 0; i < g; i++ {
		l := min(slice, n-*off)
		wr := ibv.SendWR{SGE: ibv.SGE{Addr: uint64(addrOf(op.Local)) + *off, Len: uint32(l), LKey: lkey},
			RemoteAddr: addr + *off, RKey: rkey, ID: e.ref}
		switch op.Kind {
		case transport.OpRead:
			wr.Op = ibv.OpRead
		case transport.OpWriteImm:
			wr.Op = ibv.OpWrite
			if *off+l == n && !note {
				wr.Op, wr.Imm = ibv.OpWriteImm, op.Imm
			}
		default:
			wr.Op = ibv.OpWrite
		}
		if wr.Op != ibv.OpRead && l > 0 && l <= uint64(e.cfg.MaxInlineData) {
			wr.Flags |= ibv.FlagInline // a small WRITE's data travels in the request
		}
		if i == g-1 && !note && !fence {
			wr.Flags |= ibv.FlagSignaled
			wr.ID = e.sendID(slot, gen, g)
		}
		*off += l
		wrs = append(wrs, wr)
	}
	return wrs
}

// postSend sends a message on the first QP; the receiver's posted receive
// buffers are the flow control (RNR retry waits, in the NIC, for the
// receiver to consume and repost).
func (e *Endpoint) postSend(op *transport.Op) (slot, gen uint32, posted bool) {
	n := len(op.Local)
	if n > e.maxMessage {
		complete(op, fmt.Errorf("rdma send of %d bytes: %w (max_message is %d)", n, transport.ErrTooLarge, e.maxMessage))
		return 0, 0, false
	}
	wr, err := e.sendWR(op)
	if err != nil {
		e.reject(op, err)
		return 0, 0, false
	}
	e.cmu.Lock()
	defer e.cmu.Unlock()
	if e.credits == 0 || len(e.sendWait) > 0 {
		if err := e.failed(); err != nil {
			complete(op, err)
			return 0, 0, false
		}
		e.sendWait = append(e.sendWait, op)
		return 0, 0, false
	}
	e.credits--
	return e.sendNow(op, wr)
}

// sendNow posts one message; e.cmu is held, so messages keep their order.
func (e *Endpoint) sendNow(op *transport.Op, wr ibv.SendWR) (slot, gen uint32, posted bool) {
	slot, gen, err := e.alloc(op, 1)
	if errors.Is(err, errMoving) {
		// Moving to the stream (e.cmu is held: the message keeps its
		// place before those that wait for credit).
		e.credits++
		e.sendWait = append([]*transport.Op{op}, e.sendWait...)
		return 0, 0, false
	}
	if err != nil {
		complete(op, err)
		return 0, 0, false
	}
	wr.ID = e.sendID(slot, gen, 1)
	q := e.qps[0]
	q.mu.Lock()
	if !q.reserve(1) {
		q.mu.Unlock()
		if err := e.failed(); err != nil {
			e.retire(slot, gen, err)
		} else if e.unalloc(slot, gen) {
			// Not posted, and moving to the stream: it goes there.
			e.credits++
			e.sendWait = append([]*transport.Op{op}, e.sendWait...)
		}
		return 0, 0, false
	}
	q.wrs = append(q.wrs[:0], wr)
	e.life.RLock()
	err = errReleased
	if !e.released {
		_, err = q.qp.PostSend(q.wrs)
		e.cqg.posts.Add(1)
	}
	e.life.RUnlock()
	q.mu.Unlock()
	if err != nil {
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
		return 0, 0, false
	}
	return slot, gen, true
}

// sendWR builds the work request of a message.
func (e *Endpoint) sendWR(op *transport.Op) (ibv.SendWR, error) {
	n := len(op.Local)
	wr := ibv.SendWR{Op: ibv.OpSend, Flags: ibv.FlagSignaled}
	if n > 0 {
		wr.SGE = ibv.SGE{Addr: uint64(addrOf(op.Local)), Len: uint32(n)}
		if n <= e.cfg.MaxInlineData {
			wr.Flags |= ibv.FlagInline
		} else {
			mr, err := e.dev.mr(op.Region)
			if err != nil {
				return wr, err
			}
			wr.SGE.LKey = mr.LKey
		}
	}
	return wr, nil
}

// onCredit takes credits the peer returned and sends waiting messages.
func (e *Endpoint) onCredit(n int) {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	e.credits += n
	for e.credits > 0 && len(e.sendWait) > 0 {
		switch e.path.Load() {
		case pathMoving:
			return // move sends them once it is done
		case pathStream:
			op := e.sendWait[0]
			e.sendWait = e.sendWait[1:]
			e.credits--
			e.s.Post([]*transport.Op{op}, false)
			continue
		}
		op := e.sendWait[0]
		e.sendWait = e.sendWait[1:]
		wr, err := e.sendWR(op)
		if err != nil {
			complete(op, err)
			continue
		}
		e.credits--
		e.sendNow(op, wr)
	}
}

// attachment returns what the peer said about region id (rkey, range,
// rights), asking it over the control stream on first use. The peer checks
// key and rights when it answers.
func (e *Endpoint) attachment(id uint32, key uint64, want transport.Access) (*remote, error) {
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		return nil, err
	}
	a := e.att[id]
	if a != nil && a.rights&want == want && a.key == key {
		e.mu.Unlock()
		return a, nil
	}
	gen := e.revokes
	e.mu.Unlock()
	attaches.Add(1)
	info, err := e.s.Attach(context.Background(), id, key, want)
	if err != nil {
		var ae *transport.AccessError
		if errors.As(err, &ae) {
			ae.Region, ae.Len = id, 0
		}
		return nil, err
	}
	na := &remote{base: info.Base, n: info.Len, key: key, rkey: info.RKey, rights: want}
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.att[id]; old != nil && old.key == key && old.base == na.base && old.n == na.n && old.rkey == na.rkey {
		na.rights |= old.rights
	}
	if e.revokes == gen {
		e.att[id] = na
	}
	return na, nil
}

func (e *Endpoint) revoked(id uint32) {
	if testIgnoreRevokes.Load() {
		return
	}
	e.mu.Lock()
	delete(e.att, id)
	e.revokes++
	e.mu.Unlock()
}

// attaches counts attach round trips (tests only look at it).
var attaches atomic.Uint64

// testMaxMsg, when not 0, stands for the port's max_msg_sz (tests only).
var testMaxMsg atomic.Uint32

// testIgnoreRevokes lets a test keep a stale rkey, to make the NIC itself
// refuse an access (and put the QP in the error state).
var testIgnoreRevokes atomic.Bool

// Consumed reposts receive buffers for consumed messages, and gives their
// credits back once it has.
//
// A message is delivered in place, from its ring slot (Deliver's msg is
// valid only during the call), so its slot is free only once Deliver has
// returned (slotFree), and the host may call Consumed before that, from
// inside Deliver. A credit goes back only with a receive posted for it:
// the peer never sends into a queue with no receive posted.
func (e *Endpoint) Consumed(n int) { e.repostOwed(n) }

// slotFree makes the ring slot of a delivered message free to post again,
// and posts it when a consumed message waits for it.
func (e *Endpoint) slotFree(slot uint32) {
	e.freeMu.Lock()
	e.free = append(e.free, slot)
	e.freeMu.Unlock()
	e.repostOwed(0)
}

// repostOwed adds n consumed messages to those owed a receive, posts a
// free slot again for as many of them as it can, and gives the peer back
// their credits. Once the endpoint has moved to its stream no receive is
// posted again (the queue pairs are gone, and the peer's messages come on
// the stream): every credit owed goes back at once.
func (e *Endpoint) repostOwed(n int) {
	e.freeMu.Lock()
	e.owed += n
	if e.onStream() {
		owed := e.owed
		e.owed = 0
		e.freeMu.Unlock()
		if owed > 0 {
			e.s.Consumed(owed)
		}
		return
	}
	var wrs []ibv.RecvWR
	for e.owed > 0 && len(e.free) > 0 {
		s := e.free[len(e.free)-1]
		e.free = e.free[:len(e.free)-1]
		e.owed--
		wrs = append(wrs, e.recvWR(s))
	}
	e.freeMu.Unlock()
	if len(wrs) == 0 {
		return
	}
	if err := e.repost(0, wrs); err != nil {
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
		if e.failed() != nil {
			return
		}
	}
	// The receives are posted again: the peer may send as many more.
	e.s.Consumed(len(wrs))
}

// Revoke tells the peer, over the control stream, that a local region is
// gone, so that it drops its rkey.
func (e *Endpoint) Revoke(id uint32) { e.s.Revoke(id) }

// AnnounceExport tells the peer of a later export over the control stream.
func (e *Endpoint) AnnounceExport(export []byte) error { return e.s.AnnounceExport(export) }

// handleSRQRecv handles a receive from the shared queue: which QP it came
// through says what it is (messages travel on the first QP only).
func (e *Endpoint) handleSRQRecv(wc *ibv.WC, slot uint32) {
	qi, ok := e.byQPN[wc.QPNum]
	if !ok {
		return
	}
	off := int(slot) * e.slotSize
	switch {
	case wc.Opcode == ibv.WCRecvRDMAWithImm:
		e.host.Notify(e, transport.Notification{Value: wc.Imm, Len: uint64(wc.ByteLen)})
	case qi > 0:
		n, ok := decodeNote(e.ring.Bytes()[off : off+min(int(wc.ByteLen), noteLen)])
		if !ok {
			e.fail(&transport.LinkError{Peer: "rdma peer", Cause: fmt.Errorf("%w: a message arrived on a notify-only queue pair", transport.ErrProtocol)})
			return
		}
		e.host.Notify(e, n)
	default:
		e.host.Deliver(e, e.ring.Bytes()[off:off+int(wc.ByteLen):off+int(wc.ByteLen)])
		e.slotFree(slot)
		return // reposted once consumed
	}
	if err := e.repost(0, []ibv.RecvWR{e.recvWR(slot)}); err != nil {
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
	}
}

// immRecvWR is a receive of a notify-only QP. Each has its own small
// buffer after the ring: a write-with-notify places nothing in it, and a
// notification sent as a message (iWARP) lands there.
func (e *Endpoint) immRecvWR(slot uint32) ibv.RecvWR {
	return ibv.RecvWR{ID: recvFlag | e.ref | uint64(immOnly|slot), SGE: ibv.SGE{
		Addr: uint64(e.ring.Addr()) + uint64(e.scratchOff(slot)), Len: noteSlot, LKey: e.ringMR.LKey}}
}

func (e *Endpoint) scratchOff(slot uint32) int { return e.ringSlots*e.slotSize + int(slot)*noteSlot }

// fenceOff is the byte after the scratch buffers that fence READs land in.
func (e *Endpoint) fenceOff() int { return e.ringSlots*e.slotSize + e.depth*noteSlot }

// A notification sent as a message: "XN", value, region, address, length.
const (
	noteLen  = 28
	noteSlot = 64
)

func encodeNote(b []byte, imm, region uint32, addr, n uint64) {
	b[0], b[1], b[2], b[3] = 'X', 'N', 0, 0
	binary.LittleEndian.PutUint32(b[4:], imm)
	binary.LittleEndian.PutUint32(b[8:], region)
	binary.LittleEndian.PutUint64(b[12:], addr)
	binary.LittleEndian.PutUint64(b[20:], n)
}

func decodeNote(b []byte) (transport.Notification, bool) {
	if len(b) != noteLen || b[0] != 'X' || b[1] != 'N' {
		return transport.Notification{}, false
	}
	return transport.Notification{Value: binary.LittleEndian.Uint32(b[4:]), Region: binary.LittleEndian.Uint32(b[8:]),
		Addr: binary.LittleEndian.Uint64(b[12:]), Len: binary.LittleEndian.Uint64(b[20:])}, true
}

func (e *Endpoint) recvWR(slot uint32) ibv.RecvWR {
	return ibv.RecvWR{ID: recvFlag | e.ref | uint64(slot), SGE: ibv.SGE{
		Addr: uint64(e.ring.Addr()) + uint64(slot)*uint64(e.slotSize), Len: uint32(e.slotSize), LKey: e.ringMR.LKey}}
}

// handle takes one completion of the endpoint (from its CQ's poller).
//
// It reports whether the completion is one no caller can poll for: a
// message, or a failure (see cqGroup.napping).
func (e *Endpoint) handle(wc *ibv.WC) (unwaited bool) {
	e.completions.Add(1)
	if wc.ID&recvFlag != 0 {
		e.handleRecv(wc)
		return true
	}
	slot := uint32(wc.ID & slotMask)
	gen := uint32(wc.ID>>slotBits) & genMask
	count := int(wc.ID >> (slotBits + genBits) & countMax)
	if wc.ID == e.ref {
		wc.ID = 0 // an unsignalled request's failure: no operation to retire
	}
	if qi, ok := e.byQPN[wc.QPNum]; ok && count > 0 {
		e.qps[qi].completed(count)
	}
	if wc.Status != ibv.WCSuccess {
		err := wcError(wc)
		// The endpoint fails with the completion's own reason (a remote
		// access error, say), also when the control stream ended first: the
		// peer closed it because its NIC refused this access.
		ferr := error(&transport.LinkError{Peer: "rdma peer", Cause: err})
		if wc.Status == ibv.WCWRFlushErr {
			// Flushed: not this operation's fault, its QP is gone.
			err = e.linkErr(err)
			ferr = err
		}
		// The endpoint is marked failed before the operation completes
		// (fail completes it with its own error, noted here), so that
		// whoever sees that error finds Err set and new Posts refused.
		if wc.ID != 0 {
			e.noteErr(slot, gen, err)
		}
		e.pathFailed(ferr)
		if wc.ID != 0 {
			e.retire(slot, gen, err) // a no-op unless fail found it done already
		}
		return true
	}
	e.retire(slot, gen, nil)
	return false
}

// linkErr is the error operations fail with when the connection is gone:
// it matches net.ErrClosed and ErrPeerLost.
func (e *Endpoint) linkErr(cause error) error {
	e.mu.Lock()
	down := e.down
	e.mu.Unlock()
	if down != nil {
		return down
	}
	var le *transport.LinkError
	if errors.As(cause, &le) {
		return cause
	}
	return &transport.LinkError{Peer: "rdma peer", Cause: cause}
}

// downGrace is how long the poller may report completions the NIC already
// produced after the control stream went down.
const downGrace = 200 * time.Millisecond

// controlDown runs when the control stream goes down: the peer died, or
// closed the connection after its QP failed. The completions the NIC
// produces for what was outstanding (a remote access error, say: the peer
// closes when its NIC refused our access) carry the precise reason for
// the operations they finish, and may come after the stream's end: a
// software device acknowledges in a kernel task that can run late on a
// busy host. So the QPs are left a moment to report them; then they are
// moved to the error state, which completes everything still outstanding
// through the CQ, and what is left fails a moment later.
func (e *Endpoint) controlDown(err error) {
	e.mu.Lock()
	if e.err != nil || e.down != nil {
		e.mu.Unlock()
		return
	}
	e.down = err
	e.mu.Unlock()
	time.AfterFunc(downGrace, func() {
		e.life.RLock()
		if !e.released {
			for _, q := range e.qps {
				q.qp.ToError()
			}
		}
		e.life.RUnlock()
		time.AfterFunc(downGrace, func() { e.fail(err) })
	})
}

func wcError(wc *ibv.WC) error {
	err := wc.Err()
	if errors.Is(err, ibv.ErrRemoteAccess) {
		return fmt.Errorf("%w: %w", transport.ErrRemoteAccess, err)
	}
	return err
}

// repost gives receive requests back to QP qi (or to the SRQ).
func (e *Endpoint) repost(qi int, wrs []ibv.RecvWR) error {
	e.life.RLock()
	defer e.life.RUnlock()
	if e.released {
		return errReleased
	}
	var err error
	if e.srq != nil {
		err = e.srq.PostRecv(wrs)
	} else {
		_, err = e.qps[qi].qp.PostRecv(wrs)
	}
	if err == nil {
		e.recvOut.Add(int64(len(wrs)))
	}
	return err
}

// errReleased is what a post finds once the endpoint's QPs are gone; the
// endpoint has failed by then, so callers report its error instead.
var errReleased error = &transport.LinkError{Peer: "rdma peer", Local: true}

func (e *Endpoint) handleRecv(wc *ibv.WC) {
	defer e.recvOut.Add(-1) // once delivered: see drainRecvs
	slot := uint32(wc.ID)
	if wc.Status != ibv.WCSuccess {
		// A flushed receive means the QP is in the error state (on iWARP,
		// after the peer's NIC refused an access and terminated): the
		// queue pairs are dead either way (a no-op when closing or once
		// the endpoint moved to its stream).
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: wcError(wc)})
		return
	}
	if e.srq != nil {
		e.handleSRQRecv(wc, slot)
		return
	}
	if wc.Opcode == ibv.WCRecvRDMAWithImm {
		e.host.Notify(e, transport.Notification{Value: wc.Imm, Len: uint64(wc.ByteLen)})
		// A write-with-notify used the receive request but not its buffer:
		// post it again at once.
		qi, ok := e.byQPN[wc.QPNum]
		if !ok {
			return
		}
		wr := e.immRecvWR(slot &^ immOnly)
		if slot&immOnly == 0 {
			wr = e.recvWR(slot)
		}
		if err := e.repost(qi, []ibv.RecvWR{wr}); err != nil {
			e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
		}
		return
	}
	if slot&immOnly != 0 {
		// A notification sent as a message (devices without immediates).
		s := slot &^ immOnly
		b := e.ring.Bytes()[e.scratchOff(s):]
		n, ok := decodeNote(b[:min(int(wc.ByteLen), noteLen)])
		if !ok {
			e.fail(&transport.LinkError{Peer: "rdma peer", Cause: fmt.Errorf("%w: a message arrived on a notify-only queue pair", transport.ErrProtocol)})
			return
		}
		e.host.Notify(e, n)
		qi, ok := e.byQPN[wc.QPNum]
		if !ok {
			return
		}
		if err := e.repost(qi, []ibv.RecvWR{e.immRecvWR(s)}); err != nil {
			e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: err})
		}
		return
	}
	off := int(slot) * e.slotSize
	e.host.Deliver(e, e.ring.Bytes()[off:off+int(wc.ByteLen):off+int(wc.ByteLen)])
	e.slotFree(slot)
}

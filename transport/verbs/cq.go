package verbs

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/transport"
)

// Completion queues are per device, not per endpoint: a device has a small
// set of CQs (cqGroups), each with one poller goroutine, and every endpoint
// is placed on one of them for its life. A CQ is as large as the device
// allows (capped at maxCQSize entries); each endpoint reserves what its QPs
// can have outstanding, and an endpoint that fits in none of the device's
// CQs, when the device already has maxCQsPerDevice of them, is refused with
// an error matching transport.ErrNoRoom: under the auto policy the engine
// then connects the peer over the next transport, and an acceptor's Usable
// (cqRoom) does not choose rdma for a peer that would not fit.
//
// Every wr_id carries the endpoint's reference: its index in the group's
// table and a generation that changes each time the index is reused. A
// completion whose reference does not name a current endpoint (a stale
// completion of a destroyed QP, whose number a new QP may already reuse) is
// dropped. An endpoint leaves its group only after its QPs are destroyed,
// and the poller removes it only after a poll that started after the
// request came back empty: the CQ then holds nothing of its QPs, so no
// completion is dispatched to a released endpoint, and its reservation is
// free for reuse without the CQ overflowing.
//
// The poller dispatches to endpoints in its own goroutine: operation
// completers (transport.Completer) and message handlers (Peer.Handle) run
// there and must not block, or every endpoint of the CQ stalls. The poller
// itself takes only short mutexes.
var maxCQsPerDevice = 16 // a variable for tests (SetMaxCQs)

const (
	maxCQSize  = 1 << 15
	refIdxBits = 12
	refGenBits = 7
	maxRefIdx  = 1 << refIdxBits
	refShift   = 44 // wr_id bits 44-62 hold the reference
	refMask    = 1<<(refIdxBits+refGenBits) - 1
)

// cqGroup is one CQ of a device, its completion channel and its poller.
type cqGroup struct {
	d     *device
	cq    *ibv.CQ
	ch    *ibv.CompChannel
	event bool          // use_event_channel: spin only briefly, then sleep on the channel
	spin  time.Duration // how long to spin after the last activity before sleeping
	nap   time.Duration // poll_nap: a busy poller's sleep while callers poll (negative: none)
	size  int
	// posts counts posts to the group's QPs: with busy polling the poller
	// spins while it moves, even when callers take the completions.
	posts atomic.Uint64

	// pollMu serialises polling and dispatching: the poller's, and a
	// caller's that polls for its own operation (pollFor). It guards held,
	// wcs and eps, and closed.
	pollMu sync.Mutex
	wcs    []ibv.WC
	eps    []*Endpoint
	closed bool        // the CQ is destroyed
	caller atomic.Bool // a caller is polling: the poller does not spin
	// callerPolls counts the polls of callers for their own operations
	// that ended; seenPolls is its value when the poller last looked, at
	// callerSeen (UnixNano), and found is when the poller last found a
	// completion itself (the last three are the poller's own): see
	// napping. A count rather than a time keeps the clock off the
	// caller's path: the poller reads it, between its naps.
	callerPolls atomic.Uint64
	seenPolls   uint64
	callerSeen  int64
	found       int64
	// unwaited is set when a poll dispatched a completion no caller can
	// poll for; the poller clears it when it notes found.
	unwaited atomic.Bool
	// wants counts callers waiting to poll for their own operation: the
	// spinning poller leaves the poll lock to them.
	wants atomic.Int32
	// dispatching is set while completions are being dispatched (by the
	// poller or a caller): a Post that finds the poll lock taken then gives
	// up soon (dispatchTries), since it may run inside that dispatch.
	dispatching atomic.Bool

	mu       sync.Mutex
	reserved int
	slots    []cqSlot // by reference index
	free     []int
	held     []int // slots with held completions, the poller's own
	leaves   []*cqLeave
	stopping bool
	dead     error // the CQ failed: no endpoint may join
	kick     chan struct{}
	wake     context.CancelFunc // wakes a poller asleep on the channel
	wg       sync.WaitGroup
}

type cqSlot struct {
	ep   *Endpoint
	gen  uint8
	need int
	// started is set once the endpoint can take completions (its control
	// stream is up); until then the poller keeps them in held.
	started bool
	held    []ibv.WC
}

// cqLeave is an endpoint's request to leave: done is closed once the poller
// has dropped it.
type cqLeave struct {
	idx  int
	done chan struct{}
}

// joinCQ places e on one of the device's CQs with room for need entries,
// creating a CQ when none has room, and sets e.cqg and e.ref.
func (d *device) joinCQ(e *Endpoint, need int) error {
	d.cqMu.Lock()
	defer d.cqMu.Unlock()
	if need > d.cqSize() {
		return fmt.Errorf("%w: a peer needs %d completion queue entries (%d QPs of %d send and %d receive requests), and %s allows %d per CQ",
			transport.ErrTooLarge, need, e.cfg.QPsPerPeer, e.cfg.MaxSendWR, e.depth, d.info.Name, d.cqSize())
	}
	for _, g := range d.cqs {
		if g.join(e, need) {
			return nil
		}
	}
	if len(d.cqs) >= maxCQsPerDevice {
		return d.full(need)
	}
	g, err := d.newCQGroup(e.cfg)
	if err != nil {
		return err
	}
	d.cqs = append(d.cqs, g)
	if !g.join(e, need) {
		return fmt.Errorf("rdma: %s: a new completion queue of %d entries has no room for %d", d.info.Name, g.size, need)
	}
	return nil
}

// full is joinCQ's error when no CQ of the device has room for need
// entries and it may create no more: it matches transport.ErrNoRoom, so
// that the engine connects the peer over another transport (auto policy).
// The caller holds cqMu.
func (d *device) full(need int) error {
	return fmt.Errorf("%w: %s's %d completion queues of %d entries are full (a peer needs %d): too many peers on the device, or lower rdma_max_send_wr, rdma_max_recv_wr or rdma_qps_per_peer",
		transport.ErrNoRoom, d.info.Name, len(d.cqs), d.cqSize(), need)
}

// cqRoom reports whether a peer that needs need CQ entries would find room
// on the device now (a CQ with room, or room for one more CQ), or the
// error joinCQ would return. It reserves nothing: a peer that comes in
// between may take the room, and joinCQ then fails.
func (d *device) cqRoom(need int) error {
	d.cqMu.Lock()
	defer d.cqMu.Unlock()
	if need > d.cqSize() || len(d.cqs) < maxCQsPerDevice {
		return nil // joinCQ says why a peer too large for any CQ fails
	}
	for _, g := range d.cqs {
		if g.room(need) {
			return nil
		}
	}
	return d.full(need)
}

// cqNeed is how many CQ entries a peer's QPs need, each with sendWR send
// requests, and with depth receives (per QP, or in the shared receive
// queue), on a device that is iwarp or not.
func cqNeed(cfg Config, iwarp bool, depth int) int {
	qps := cfg.QPsPerPeer
	if iwarp {
		qps = max(2, qps) // notifications travel on a QP of their own
	}
	if cfg.UseSRQ {
		return qps*cfg.MaxSendWR + depth*max(2, qps) + 16
	}
	return qps*(cfg.MaxSendWR+depth) + 16
}

func (d *device) cqSize() int {
	n := maxCQSize
	if d.info.MaxCQE > 0 {
		n = min(n, d.info.MaxCQE)
	}
	return n
}

func (d *device) newCQGroup(cfg Config) (_ *cqGroup, err error) {
	g := &cqGroup{d: d, event: cfg.UseEventChannel, spin: cfg.PollSpin, kick: make(chan struct{}, 1),
		wcs: make([]ibv.WC, 64), eps: make([]*Endpoint, 64)}
	if !g.event {
		g.spin = cfg.PollIdle
		g.nap = cfg.PollNap
		if g.nap == 0 && !d.iwarp {
			g.nap = DefaultPollNap
		}
	}
	if g.ch, err = d.ctx.CreateCompChannel(); err != nil {
		return nil, fmt.Errorf("rdma: %s: %w", d.info.Name, err)
	}
	if g.cq, err = d.ctx.CreateCQ(d.cqSize(), g.ch); err != nil {
		g.ch.Close()
		return nil, fmt.Errorf("rdma: %s: completion queue of %d entries: %w", d.info.Name, d.cqSize(), err)
	}
	g.size = min(d.cqSize(), g.cq.CQE())
	g.wg.Add(1)
	go g.run()
	return g, nil
}

// room reports whether join would find room for need entries.
func (g *cqGroup) room(need int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead == nil && !g.stopping && g.reserved+need <= g.size && (len(g.free) > 0 || len(g.slots) < maxRefIdx)
}

// join adds e if the CQ has room.
func (g *cqGroup) join(e *Endpoint, need int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead != nil || g.stopping || g.reserved+need > g.size {
		return false
	}
	var idx int
	if n := len(g.free); n > 0 {
		idx = g.free[n-1]
		g.free = g.free[:n-1]
	} else {
		if len(g.slots) >= maxRefIdx {
			return false
		}
		g.slots = append(g.slots, cqSlot{})
		idx = len(g.slots) - 1
	}
	s := &g.slots[idx]
	// Generations run 1..127: a reference is never 0.
	s.gen = s.gen%(1<<refGenBits-1) + 1
	s.ep, s.need, s.started, s.held = e, need, false, nil
	g.reserved += need
	e.cqg, e.ref = g, uint64(idx|int(s.gen)<<refIdxBits)<<refShift
	g.poke()
	return true
}

// startCQ lets the poller hand e its completions: those that came before
// (a message the peer sent as soon as its QPs were ready) first.
func (e *Endpoint) startCQ() {
	g := e.cqg
	g.mu.Lock()
	g.slots[int(e.ref>>refShift)&(maxRefIdx-1)].started = true
	g.poke()
	g.mu.Unlock()
}

// leave removes e from its group once its QPs are destroyed: when it
// returns, the poller has dispatched the last completion it will ever give
// e. It must not be called from the poller (a completer or handler).
func (e *Endpoint) leaveCQ() {
	g := e.cqg
	if g == nil {
		return
	}
	e.cqg = nil
	idx := int(e.ref>>refShift) & (maxRefIdx - 1)
	l := &cqLeave{idx: idx, done: make(chan struct{})}
	g.mu.Lock()
	if g.stopping {
		// The poller is gone (or going): drop the endpoint here.
		g.drop(idx)
		g.mu.Unlock()
		return
	}
	g.leaves = append(g.leaves, l)
	g.poke()
	g.mu.Unlock()
	<-l.done
}

// drop frees slot idx; g.mu is held.
func (g *cqGroup) drop(idx int) {
	s := &g.slots[idx]
	if s.ep == nil {
		return
	}
	g.reserved -= s.need
	s.ep, s.need, s.held = nil, 0, nil
	g.free = append(g.free, idx)
}

// poke wakes the poller; g.mu is held.
func (g *cqGroup) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
	if g.wake != nil {
		g.wake()
		g.wake = nil
	}
}

// close stops the poller and destroys the CQ and channel. Every endpoint
// must have released its QPs.
func (g *cqGroup) close() {
	g.mu.Lock()
	g.stopping = true
	g.poke()
	g.mu.Unlock()
	g.wg.Wait()
	g.pollMu.Lock()
	g.closed = true
	g.cq.Close()
	g.pollMu.Unlock()
	g.ch.Close()
}

// closeCQs stops the device's pollers and destroys its CQs.
func (d *device) closeCQs() {
	d.cqMu.Lock()
	cqs := d.cqs
	d.cqs = nil
	d.cqMu.Unlock()
	for _, g := range cqs {
		g.close()
	}
}

// run is the poller: it dispatches completions to their endpoints, finishes
// leave requests once the CQ has been found empty after them, and when
// there is nothing to do spins, then sleeps on the completion channel.
//
// Busy polling (the default, use_event_channel: false: the polling mode
// that perftest and the RDMA config tables of other engines use) spins
// while operations are posted, whoever polls their completions, and sleeps
// only after rdma_poll_idle without a post or a completion: a stream of
// requests never waits for an event, and an idle engine uses no CPU. A
// negative rdma_poll_idle never sleeps while a peer is connected, as
// perftest's both sides poll. With use_event_channel the poller spins
// rdma_poll_spin after its last completion and sleeps at once while a
// caller polls for its own operation.
func (g *cqGroup) run() {
	defer g.wg.Done()
	var pending []*cqLeave
	events := 0
	// woke: the poller woke on the channel and has found nothing since (a
	// caller took the completion): it sleeps again without spinning.
	woke := false
	lastPosts := g.posts.Load()
	defer func() {
		if events > 0 {
			g.cq.AckEvents(events)
		}
	}()
	for {
		g.mu.Lock()
		pending = append(pending, g.leaves...)
		g.leaves = nil
		stopping, active := g.stopping, g.reserved > 0
		g.mu.Unlock()
		n, err := g.pollLocked()
		if err != nil {
			g.broken(err, pending)
			return
		}
		if n > 0 {
			g.noteFound()
			woke = false
			continue
		}
		// Empty, in a poll that started after every pending request:
		// nothing of those endpoints' QPs is left in the CQ.
		if len(pending) > 0 {
			g.mu.Lock()
			for _, l := range pending {
				g.drop(l.idx)
			}
			g.mu.Unlock()
			for _, l := range pending {
				close(l.done)
			}
			pending = pending[:0]
			continue
		}
		if stopping {
			return
		}
		if !active {
			<-g.kick // idle: no endpoint, nothing to poll for
			continue
		}
		if !g.event {
			select {
			case <-g.kick: // new leaves, or stopping: look at them first
				continue
			default:
			}
		}
		// Spin before sleeping: busy polling while operations are posted;
		// with the channel, a short window after activity (a request that
		// completes within it skips the wake-up), and none while a caller
		// polls for its own operation or after a wake-up that found nothing.
		if !g.event || g.spin > 0 && !g.caller.Load() && !woke {
			if n, err = g.spinPoll(&lastPosts); err != nil {
				g.broken(err, pending)
				return
			}
			if n > 0 || !g.event && len(g.kick) > 0 {
				continue
			}
		}
		if err := g.cq.ReqNotify(false); err != nil {
			g.broken(err, pending)
			return
		}
		if n, err = g.pollLocked(); err != nil {
			g.broken(err, pending)
			return
		} else if n > 0 {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		g.mu.Lock()
		select {
		case <-g.kick:
			cancel()
		default:
			g.wake = cancel
		}
		g.mu.Unlock()
		if ctx.Err() != nil {
			continue
		}
		pollerSleeps.Add(1)
		pollersAsleep.Add(1)
		_, err = g.ch.WaitEvent(ctx)
		pollersAsleep.Add(-1)
		g.mu.Lock()
		g.wake = nil
		g.mu.Unlock()
		cancel()
		woke = true
		if err == nil {
			if events++; events >= 64 {
				g.cq.AckEvents(events)
				events = 0
			}
		}
	}
}

// spinPoll polls until it finds completions, the poller is kicked, or the
// spin ends: with busy polling, g.spin after the last post (never, when
// negative); with the channel, g.spin, or as soon as a caller polls.
func (g *cqGroup) spinPoll(lastPosts *uint64) (int, error) {
	until := time.Now().Add(g.spin)
	for len(g.kick) == 0 {
		if g.event {
			if g.caller.Load() || time.Now().After(until) {
				return 0, nil
			}
		} else if p := g.posts.Load(); p != *lastPosts {
			*lastPosts = p
			until = time.Now().Add(g.spin)
		} else if g.spin >= 0 && time.Now().After(until) {
			return 0, nil
		}
		if !g.event && g.nap > 0 && g.napping() {
			pollerNaps.Add(1)
			time.Sleep(g.nap)
		} else {
			yield()
		}
		if n, err := g.tryPoll(); n > 0 || err != nil {
			if n > 0 {
				g.noteFound()
			}
			return n, err
		}
	}
	return 0, nil
}

// While callers poll for their own operations and take every completion
// (a stream of synchronous calls: a page fetch, a small WRITE), the busy
// poller naps poll_nap between its polls instead of spinning, until
// callerWindow has passed without a caller's poll or a poll dispatches a
// completion no caller can poll for (a message or a notification, which
// only the poller is sure to find: then it spins again, for callerWindow
// at least). A caller polls for a synchronous operation (Post) and for a
// batch it waits for (PollUntil).
//
// Its spinning took a whole CPU from whatever else had to run meanwhile:
// on SoftRoCE the device's own work in the kernel, so that a 4 KiB page
// fetch's p99 in the VM was 360-410 µs, against 250-270 µs with naps of
// 50 µs, and its p99.9 1.4-2.2 ms against 0.46-0.65 ms (3 interleaved
// rounds of 2 s each; ib_read_lat's p99 there: 170-230 µs). A hardware NIC
// needs no CPU of the host, but the application's other goroutines do.
// On SoftRoCE the nap also raised 64 KiB depth-32 bandwidth by 20-24% and
// cut the 8 B WRITE round trip's p99 to a third, and cost 8% of its p50 (5
// interleaved rounds).
//
// Over SoftiWARP, whose work runs in kernel threads, the nap cost 15% of
// 64 KiB depth-32 bandwidth and 18% of the 8 B round trip's p50 (3
// interleaved rounds), while its p99 fell to 0.28x: iWARP devices do not
// nap unless rdma_poll_nap says so, and -1ns turns it off everywhere.
const callerWindow = time.Millisecond

// noteFound notes, after a poll of the poller that found completions,
// whether one of them was a completion no caller polls for.
func (g *cqGroup) noteFound() {
	if g.unwaited.Load() && g.unwaited.Swap(false) {
		g.found = time.Now().UnixNano()
	}
}

// napping reports whether the busy poller naps: a caller polled within
// callerWindow (as the poller saw it, from one of its polls to the next),
// and the poller found nothing itself within it.
func (g *cqGroup) napping() bool {
	now := time.Now().UnixNano()
	if p := g.callerPolls.Load(); p != g.seenPolls || g.caller.Load() {
		g.seenPolls, g.callerSeen = p, now
	}
	return now-g.callerSeen < int64(callerWindow) && now-g.found >= int64(callerWindow)
}

// pollLocked is poll under pollMu, after handing over held completions.
func (g *cqGroup) pollLocked() (int, error) {
	g.pollMu.Lock()
	return g.pollHeld()
}

// tryPoll is pollLocked unless a caller holds pollMu or wants it (to poll
// for its own operation): then it returns at once, so that the spinning
// poller never blocks on the mutex, the caller's unlock never has a poller
// to wake, and a caller that wants to poll finds the lock free after at
// most one poll of the poller.
func (g *cqGroup) tryPoll() (int, error) {
	if g.wants.Load() > 0 || !g.pollMu.TryLock() {
		return 0, nil
	}
	return g.pollHeld()
}

// pollHeld polls with pollMu held, and releases it.
func (g *cqGroup) pollHeld() (int, error) {
	defer g.pollMu.Unlock()
	g.release()
	return g.poll(g.wcs, g.eps)
}

// pollerSleeps counts the times a poller went to sleep on its completion
// channel (tests only look at it).
var pollerSleeps atomic.Uint64

// pollerNaps counts the naps of busy pollers (tests only look at it).
var pollerNaps atomic.Uint64

// pollersAsleep is how many pollers sleep on their channel right now.
var pollersAsleep atomic.Int32

// syncPolled counts operations whose completion the posting goroutine
// polled itself (tests only look at it).
var syncPolled atomic.Uint64

// syncPollMax bounds how long a caller polls for its own operation.
const syncPollMax = time.Millisecond

// How many times pollFor tries the poll lock (yielding in between) before
// it leaves the operation to the poller: while completions are being
// dispatched, and otherwise.
const (
	dispatchTries = 8
	lockTries     = 32
)

// pollFor polls the CQ in the caller's goroutine until the operation of
// slot and gen completes, for at most syncPollMax, dispatching whatever
// else it finds as the poller would. While another goroutine holds the poll
// lock it waits a little: the spinning poller leaves the lock to a caller
// that wants it (wants) after its current poll, and when that poll found
// the caller's own completion (the poller often wins that race), waiting
// for its dispatch is far cheaper than giving up and being woken by it. It
// gives up after dispatchTries while completions are being dispatched, since
// the caller may be a handler that posts from inside that very dispatch.
func (e *Endpoint) pollFor(slot, gen uint32) { pollUntil(e, slotWait{e, slot, gen}, true) }

// PollUntil implements transport.Poller, as pollFor does for a posted
// operation: a batch's waiter (Batch.Wait, a page-fetch pipeline's Next)
// polls for its completions rather than being woken by the poller.
func (e *Endpoint) PollUntil(w transport.Waiter) { pollUntil(e, w, false) }

// slotWait waits for the operation of slot and gen.
type slotWait struct {
	e         *Endpoint
	slot, gen uint32
}

func (w slotWait) Done() bool { return w.e.slotDone(w.slot, w.gen) }

// pollUntil is pollFor and PollUntil, generic so that neither allocates.
// The endpoint may be closed by another goroutine meanwhile: its group is
// read once, under the life lock, and used throughout (a closed endpoint
// leaves the group, which outlives it, and its operations are failed).
// posted says that w's operation was posted just now: it is polled for
// before w is asked whether it is done, which then is most unlikely (and
// asking takes the endpoint's lock).
func pollUntil[W transport.Waiter](e *Endpoint, w W, posted bool) {
	var g *cqGroup
	e.life.RLock()
	if !e.released { // leaveCQ clears cqg after closeQPs marked it released
		g = e.cqg
	}
	e.life.RUnlock()
	if g == nil {
		return
	}
	if !g.pollMu.TryLock() && !waitPollLock(g, w) {
		return
	}
	defer g.pollMu.Unlock()
	if g.closed {
		return
	}
	g.caller.Store(true)
	defer g.stopCaller()
	var deadline time.Time
	found := false // this call's polls dispatched completions
	for i := 0; ; i++ {
		if (i > 0 || !posted) && w.Done() {
			if found {
				syncPolled.Add(1)
			}
			return
		}
		g.release()
		n, err := g.poll(g.wcs, g.eps)
		if err != nil {
			return // the poller finds it too, and fails the endpoints
		}
		if n > 0 {
			found = true
			continue
		}
		// The clock is read every 64 polls only: an operation that
		// completes sooner costs no clock read.
		if i%64 == 63 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(syncPollMax)
			} else if now.After(deadline) {
				return
			}
			yield()
		}
	}
}

// stopCaller ends a caller's poll.
func (g *cqGroup) stopCaller() {
	g.callerPolls.Add(1)
	g.caller.Store(false)
}

// waitPollLock takes the poll lock for pollUntil once it was found taken,
// counted in wants meanwhile. It reports false, without the lock, when it
// gives up or w is done meanwhile.
func waitPollLock[W transport.Waiter](g *cqGroup, w W) bool {
	g.wants.Add(1)
	defer g.wants.Add(-1)
	for tries := 0; ; tries++ {
		if tries == lockTries || g.dispatching.Load() && tries >= dispatchTries || w.Done() {
			return false
		}
		yield()
		if g.pollMu.TryLock() {
			return true
		}
	}
}

// poll takes one batch of completions and dispatches each to its endpoint.
func (g *cqGroup) poll(wcs []ibv.WC, eps []*Endpoint) (int, error) {
	n, err := g.cq.Poll(wcs)
	if err != nil || n == 0 {
		return n, err
	}
	held := len(g.held)
	g.mu.Lock()
	for i := range n {
		ref := int(wcs[i].ID>>refShift) & refMask
		idx, gen := ref&(maxRefIdx-1), uint8(ref>>refIdxBits)
		eps[i] = nil
		if idx >= len(g.slots) || g.slots[idx].gen != gen || g.slots[idx].ep == nil {
			continue // stale: its endpoint is gone
		}
		s := &g.slots[idx]
		if !s.started || len(s.held) > 0 {
			if len(s.held) == 0 {
				g.held = append(g.held, idx)
			}
			s.held = append(s.held, wcs[i])
			continue
		}
		eps[i] = s.ep
	}
	g.mu.Unlock()
	g.dispatching.Store(true)
	defer g.dispatching.Store(false)
	if len(g.held) > held {
		g.release() // an endpoint started while its first completions were held
	}
	unwaited := false
	for i := range n {
		if e := eps[i]; e != nil {
			if e.handle(&wcs[i]) {
				unwaited = true
			}
			eps[i] = nil
		}
	}
	if unwaited {
		g.unwaited.Store(true)
	}
	return n, nil
}

// release dispatches the held completions of endpoints that have started,
// in order, before anything polled later.
func (g *cqGroup) release() {
	if len(g.held) == 0 {
		return
	}
	keep := g.held[:0]
	for _, idx := range g.held {
		g.mu.Lock()
		s := &g.slots[idx]
		e, started, wcs := s.ep, s.started, s.held
		if e == nil {
			g.mu.Unlock()
			continue
		}
		if !started {
			g.mu.Unlock()
			keep = append(keep, idx)
			continue
		}
		s.held = nil
		g.mu.Unlock()
		was := g.dispatching.Swap(true) // poll may be dispatching already
		for i := range wcs {
			e.handle(&wcs[i])
		}
		g.dispatching.Store(was)
	}
	g.held = keep
}

// broken fails every endpoint of a CQ that cannot be polled any more, and
// lets pending leaves go.
func (g *cqGroup) broken(err error, pending []*cqLeave) {
	g.mu.Lock()
	g.dead = err
	g.stopping = true
	var eps []*Endpoint
	for _, s := range g.slots {
		if s.ep != nil {
			eps = append(eps, s.ep)
		}
	}
	pending = append(pending, g.leaves...)
	g.leaves = nil
	for _, l := range pending {
		g.drop(l.idx)
	}
	g.mu.Unlock()
	for _, l := range pending {
		close(l.done)
	}
	for _, e := range eps {
		e.pathFailed(&transport.LinkError{Peer: "rdma peer", Cause: fmt.Errorf("completion queue: %w", err)})
	}
}

func yield() { runtime.Gosched() }

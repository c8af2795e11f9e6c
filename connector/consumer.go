package connector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xferio/xfer"
)

// olderProducer reports whether rep refuses a get for asking for an inline
// value, which a producer from before inline values does ("unknown
// flags"); the get is then asked again without.
func olderProducer(r *remote, flags byte, rep reply) bool {
	if flags&flagInline == 0 || rep.status != statusRefused || !strings.Contains(rep.msg, "unknown flags") {
		return false
	}
	r.noInline.Store(true)
	return true
}

// GetOption changes what a Get does.
type GetOption func(*getOptions)

type getOptions struct{ noWait bool }

// NoWait makes a Get for a key the producer does not hold fail at once
// with ErrNotFound, instead of waiting for it to be put.
func NoWait() GetOption { return func(o *getOptions) { o.noWait = true } }

// Get fetches the value stored under (fromStage, toStage, key) into the
// connector's pool and returns it, with its size, as a Buffer to read in
// place and Release. The producer is meta.Producer, or Config.Producer when
// meta is nil or names none. With full metadata (a Kind and Size, as Put
// returned it) the value moves at once; with only the producer's address,
// the producer supplies the rest. A key not put yet is waited for until it
// is put or ctx ends (NoWait changes that).
func (c *Connector) Get(ctx context.Context, fromStage, toStage, key string, meta *Meta, opts ...GetOption) (*Buffer, int64, error) {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	gctx, unwatch := c.watchProducer(ctx, key, meta)
	b, err := c.get(gctx, fromStage, toStage, key, meta, opts)
	var se *StalledError
	if err != nil && errors.As(context.Cause(gctx), &se) {
		err = se // the watch's probe found the producer silent
	}
	unwatch()
	if err != nil && byBound(ctx) {
		err = c.stalled(key, meta, err)
	}
	if err != nil {
		c.stats.errors.Add(1)
		if ctx.Err() != nil {
			c.stats.timeouts.Add(1)
		}
		c.stats.failed(err)
		return nil, 0, err
	}
	c.stats.succeeded()
	c.stats.gets.Add(1)
	c.stats.bytesGot.Add(b.meta.Size)
	return b, b.meta.Size, nil
}

func (c *Connector) get(ctx context.Context, fromStage, toStage, key string, meta *Meta, opts []GetOption) (*Buffer, error) {
	var o getOptions
	for _, f := range opts {
		f(&o)
	}
	fail := func(err error) error { return fmt.Errorf("connector: get %q: %w", key, err) }
	if c.cfg.Role == RoleProducer {
		return nil, fail(fmt.Errorf("a producer does not get: %w", ErrRole))
	}
	k, err := slotKey(fromStage, toStage, key)
	if err != nil {
		return nil, err
	}
	addr := c.cfg.Producer
	var full *Meta
	if meta != nil {
		if meta.Producer != "" {
			addr = meta.Producer
		}
		if meta.Key != "" && meta.Key != k {
			return nil, fail(fmt.Errorf("the metadata is for %q, not %q", meta.Key, k))
		}
		if meta.Kind != 0 {
			m := *meta
			m.Key = k
			if err := m.Check(); err != nil {
				return nil, fail(err)
			}
			full = &m
		}
	}
	if addr == "" {
		return nil, fail(errors.New("no producer: the metadata names none and Config.Producer is not set"))
	}
	if c.isClosed() {
		return nil, c.errClosed("get")
	}
	var flags byte
	if o.noWait {
		flags |= flagNoWait
	}
	for {
		r, err := c.dial(ctx, addr)
		if err != nil {
			if c.rideThrough(ctx, err) {
				continue
			}
			return nil, fail(err)
		}
		var b *Buffer
		if c.pull == PullRead {
			b, err = c.getRead(ctx, r, k, flags)
		} else {
			b, err = c.getWrite(ctx, r, k, flags, full)
		}
		if err != nil {
			if c.rideThrough(ctx, err) {
				continue
			}
			return nil, fmt.Errorf("connector: get %q from %s: %w", key, addr, err)
		}
		return b, nil
	}
}

// rideThrough reports whether a Get whose dial of its producer, or whose
// connection to it, failed with err should try again, after a pause: when
// it rides through restarts (Config.CallTimeout), the producer is down or
// its connection was lost (not stalled), and ctx has not ended.
func (c *Connector) rideThrough(ctx context.Context, err error) bool {
	if c.cfg.CallTimeout == 0 || !producerDown(err) && !errors.Is(err, xfer.ErrPeerLost) || errors.Is(err, xfer.ErrStalled) || c.isClosed() {
		return false
	}
	t := time.NewTimer(rideThroughPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rideThroughPause is the pause between the dials of a producer that is
// down, while a Get rides through its restart (Config.CallTimeout).
const rideThroughPause = 100 * time.Millisecond

// producerDown reports whether err, a failed dial of a producer, says its
// address refuses or resets connections: it died, or is restarting.
func producerDown(err error) bool {
	var re *xfer.ReconnectError
	return errors.As(err, &re) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// watchProducer returns ctx, for a Get of key (with meta) whose caller
// gave a deadline longer than the call bound and its probe (as the Python
// binding's get_timeout does): ended with a *StalledError when the
// producer stops answering, found by a probe each call bound. So a stopped
// producer fails such a Get within op_timeout too, while a live one may
// take until the deadline to put the key. Without such a deadline, or when
// the Get rides through restarts, ctx as it is: the bound ends it.
func (c *Connector) watchProducer(ctx context.Context, key string, meta *Meta) (context.Context, func()) {
	dl, ok := ctx.Deadline()
	if !ok || c.bound <= 0 || c.cfg.CallTimeout != 0 || time.Until(dl) <= c.bound+c.probeWait {
		return ctx, func() {}
	}
	addr := c.cfg.Producer
	if meta != nil && meta.Producer != "" {
		addr = meta.Producer
	}
	if addr == "" {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancelCause(ctx)
	// A timer, not a goroutine, waits out the first bound: most gets end
	// before it, and then cost no more than the timer.
	t := time.AfterFunc(c.bound, func() {
		if wctx.Err() != nil || c.isClosed() {
			return
		}
		c.wg.Go(func() {
			for {
				if perr := c.probe(addr); perr != nil {
					if wctx.Err() == nil && !c.isClosed() {
						cancel(&StalledError{Op: "get", Key: key, Producer: addr, Bound: c.bound, Err: perr})
					}
					return
				}
				select {
				case <-wctx.Done():
					return
				case <-time.After(c.bound):
				}
			}
		})
	})
	return wctx, func() {
		t.Stop()
		cancel(nil)
	}
}

// stalled words the error err of a Get of key (with meta) that the call
// bound ended: a *StalledError unless the producer answers a probe.
func (c *Connector) stalled(key string, meta *Meta, err error) error {
	addr := c.cfg.Producer
	if meta != nil && meta.Producer != "" {
		addr = meta.Producer
	}
	if addr == "" {
		return err
	}
	if perr := c.probe(addr); perr != nil {
		return &StalledError{Op: "get", Key: key, Producer: addr, Bound: c.bound, RideThrough: c.cfg.CallTimeout != 0, Err: perr}
	}
	return fmt.Errorf("%w (the producer is alive: the key was not put within %v, the call bound)", err, c.bound)
}

// dial returns the producer at addr, connected, with this connector's
// handlers on its messages and notifications.
func (c *Connector) dial(ctx context.Context, addr string) (*remote, error) {
	p, err := c.eng.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, net.ErrClosed
	}
	r := c.remote[p]
	if r == nil {
		r = &remote{peer: p, calls: make(map[uint32]*pending)}
		c.remote[p] = r
		p.Handle(c.handler(p))
		p.HandleNotify(func(n xfer.Notification) {
			if !r.deliver(n.Value, result{notified: true}) {
				c.log.Warn("connector: a producer notified an unknown get", "peer", p.String(), "id", n.Value)
			}
		})
	}
	return r, nil
}

// handler receives the messages of peer p: requests from consumers,
// answers from producers.
func (c *Connector) handler(p *xfer.Peer) func([]byte) {
	return func(msg []byte) {
		if len(msg) > 0 && msg[0] == msgInfo {
			c.onReply(p, msg)
			return
		}
		req, err := parseRequest(msg)
		if err != nil {
			c.log.Warn("connector: a malformed request", "peer", p.String(), "err", err)
			if len(msg) >= 5 && msg[0] == msgGet {
				c.mu.Lock()
				if !c.closed {
					id := binary.LittleEndian.Uint32(msg[1:5])
					c.answerLocked(p, id, statusRefused, nil, xfer.RemoteAddr{}, err.Error(), true)
				}
				c.mu.Unlock()
			}
			return
		}
		c.onRequest(p, req)
	}
}

func (c *Connector) onReply(p *xfer.Peer, msg []byte) {
	rep, err := parseReply(msg)
	c.mu.Lock()
	r := c.remote[p]
	c.mu.Unlock()
	if r == nil {
		c.log.Warn("connector: an answer from a peer this connector did not ask", "peer", p.String())
		return
	}
	if err != nil {
		c.log.Warn("connector: a malformed answer", "peer", p.String(), "err", err)
		if len(msg) >= 5 {
			id := binary.LittleEndian.Uint32(msg[1:5])
			r.deliver(id, result{err: fmt.Errorf("%w: %w", err, ErrProtocol)})
		}
		return
	}
	if !r.deliver(rep.id, result{rep: rep}) {
		c.log.Warn("connector: an answer to an unknown get", "peer", p.String(), "id", rep.id)
	}
}

// call sends a get and waits for its end. When ctx ends or the connection
// fails first, the get is abandoned: the producer is told, and late hands
// whatever still arrives for it (to release a claim, free a buffer).
// dst is where an inline value of its length goes (nil: none).
// A get carries the releases held back for its producer; any other
// message goes after them.
func (c *Connector) call(ctx context.Context, r *remote, dst []byte, msg func(id uint32) []byte, late func(result)) (result, error) {
	res, carried, err := c.callOnce(ctx, r, dst, msg, late)
	if len(carried) > 0 && err == nil && res.rep.status == statusRefused && strings.Contains(res.rep.msg, "unknown flags") {
		// A producer from before carried releases refused the whole get:
		// the releases go alone, now and from now on, and the get again.
		r.noCarry.Store(true)
		c.sendReleases(r, carried)
		return c.call(ctx, r, dst, msg, late)
	}
	return res, err
}

// callOnce is call, less asking an older producer again; it also returns
// the releases its get carried.
func (c *Connector) callOnce(ctx context.Context, r *remote, dst []byte, msg func(id uint32) []byte, late func(result)) (result, []byte, error) {
	id, ch := r.newCall(dst)
	m := msg(id)
	var carried []byte
	if m[0] == msgGet {
		m, carried = c.carry(r, m)
	} else {
		c.sendReleases(r, nil)
	}
	if err := c.send(ctx, r.peer, m); err != nil {
		r.forget(id)
		if len(carried) > 0 {
			c.sendReleases(r, carried)
		}
		return result{}, nil, err
	}
	// The connection the get left on: Send may have dialed a new one.
	down := r.peer.Down()
	if c.spin > 0 {
		alone := getWaiters.Add(1) == 1
		defer getWaiters.Add(-1)
		if alone {
			if res, ok := spinRecv(ch, c.spin); ok {
				return res, carried, res.err
			}
		}
	}
	select {
	case res := <-ch:
		return res, carried, res.err
	case <-ctx.Done():
	case <-down:
	case <-c.ctx.Done():
		r.forget(id)
		return result{}, nil, net.ErrClosed
	}
	err := context.Cause(ctx)
	if ctx.Err() == nil {
		err = fmt.Errorf("the connection to the producer failed: %w", xfer.ErrPeerLost)
	}
	select {
	case res := <-ch:
		// It ended as it was abandoned.
		if res.err == nil {
			return res, carried, nil
		}
		return res, carried, res.err
	default:
	}
	// Abandoned by its ctx, not by a lost connection: the producer hears
	// so. Decided now: ctx may end later for reasons of the caller's own
	// (a Get's watch of its producer ends when the Get returns), and a
	// connection that was lost has nothing to cancel.
	abandoned := ctx.Err() != nil
	c.wg.Go(func() {
		if abandoned {
			c.send(c.ctx, r.peer, appendCancel(nil, id))
		}
		select {
		case res := <-ch:
			late(res)
		case <-down:
			r.forget(id)
			late(result{err: xfer.ErrPeerLost})
		case <-c.ctx.Done():
		}
	})
	return result{}, nil, err
}

// answerErr turns a producer's non-ok answer into an error.
func answerErr(rep reply) error {
	switch rep.status {
	case statusNotFound:
		return fmt.Errorf("%w (%s)", ErrNotFound, rep.msg)
	case statusRefused:
		return fmt.Errorf("the producer refused the request: %s: %w", rep.msg, ErrProtocol)
	case statusClosed:
		return fmt.Errorf("the producer is closing: %w", xfer.ErrPeerLost)
	default:
		return fmt.Errorf("the producer failed: %s", rep.msg)
	}
}

// release ends the claim id at the producer r: taken says whether this
// consumer has the value. The release waits for the next get to r to
// carry it, for releaseDelay at most.
func (c *Connector) release(r *remote, id uint32, taken bool) {
	if !r.noCarry.Load() {
		r.relMu.Lock()
		if len(r.rels) < maxCarried*carriedLen {
			r.rels = appendCarriedRelease(r.rels, id, taken)
			if !r.relArmed {
				r.relArmed = true
				if r.relTimer == nil {
					r.relTimer = time.AfterFunc(releaseDelay, func() { c.releaseLate(r) })
				} else {
					r.relTimer.Reset(releaseDelay)
				}
			}
			r.relMu.Unlock()
			return
		}
		r.relMu.Unlock()
	}
	c.sendRelease(r, id, taken)
}

// sendRelease sends one release on its own.
func (c *Connector) sendRelease(r *remote, id uint32, taken bool) {
	if err := c.send(c.ctx, r.peer, appendRelease(nil, id, taken)); err != nil {
		c.log.Debug("connector: releasing a claim failed", "peer", r.peer.String(), "err", err)
	}
}

// sendReleases sends rels (releases a get did not carry after all) and
// the releases held back for r, each on its own.
func (c *Connector) sendReleases(r *remote, rels []byte) {
	r.relMu.Lock()
	held := r.rels
	if len(held) > 0 {
		r.rels = nil
	}
	r.relMu.Unlock()
	for _, b := range [][]byte{rels, held} {
		for ; len(b) >= carriedLen; b = b[carriedLen:] {
			c.sendRelease(r, binary.LittleEndian.Uint32(b), b[4] == 1)
		}
	}
}

// releaseLate sends the releases no get carried within releaseDelay. Once
// the connector stops, its syncs send them (Stop).
func (c *Connector) releaseLate(r *remote) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	defer c.wg.Done()
	r.relMu.Lock()
	r.relArmed = false
	r.relMu.Unlock()
	c.sendReleases(r, nil)
}

// carry makes the get m carry the releases held back for r, when they fit
// and the producer takes them. It returns the message and what it carries.
func (c *Connector) carry(r *remote, m []byte) ([]byte, []byte) {
	if r.noCarry.Load() {
		return m, nil
	}
	r.relMu.Lock()
	defer r.relMu.Unlock()
	n := len(r.rels)
	if n == 0 || len(m)+1+n > maxControl {
		return m, nil
	}
	m = appendCarried(m, r.rels)
	r.rels = r.rels[:0]
	return m, m[len(m)-n:]
}

// takeInline ends a get answered with its value inline (statusValue): the
// value is in buf already (res.inDst), or is copied into a buffer of the
// right size, which replaces buf.
func (c *Connector) takeInline(ctx context.Context, r *remote, id uint32, res result, buf xfer.Buffer) (*Buffer, error) {
	m := res.rep.meta
	if !res.inDst {
		c.free(buf)
		var err error
		if buf, err = c.alloc(ctx, "get", m.Size); err != nil {
			c.release(r, id, false)
			return nil, err
		}
		if m.Size > 0 {
			copy(buf.Bytes()[:m.Size], res.rep.data)
		}
	}
	c.release(r, id, true)
	return &Buffer{c: c, meta: m, buf: buf}, nil
}

// answered ends a get whose call returned res and err where every get
// ends alike: on the error, or with the value the answer carried inline
// (into buf, or a buffer of its own: takeInline). done is false when the
// get goes on with res.
func (c *Connector) answered(ctx context.Context, r *remote, id uint32, res result, err error, buf xfer.Buffer) (b *Buffer, done bool, _ error) {
	if err != nil {
		return nil, true, notFoundIfWaiting(err)
	}
	if res.rep.status == statusValue {
		b, err := c.takeInline(ctx, r, id, res, buf)
		return b, true, err
	}
	return nil, false, nil
}

// getRead gets the slot's address from the producer and READs the value;
// a small value comes inline in the answer instead.
func (c *Connector) getRead(ctx context.Context, r *remote, k string, flags byte) (*Buffer, error) {
	var id uint32
	if c.inline && !r.noInline.Load() {
		flags |= flagInline
	}
	res, err := c.call(ctx, r, nil, func(i uint32) []byte { id = i; return appendGet(nil, i, flags, k, xfer.RemoteAddr{}, 0) },
		func(res result) {
			if res.err == nil && (res.rep.status == statusOK || res.rep.status == statusValue) {
				c.release(r, res.rep.id, false)
			}
		})
	if b, done, err := c.answered(ctx, r, id, res, err, xfer.Buffer{}); done {
		return b, err
	}
	if olderProducer(r, flags, res.rep) {
		return c.getRead(ctx, r, k, flags&^flagInline)
	}
	if res.rep.status != statusOK {
		return nil, answerErr(res.rep)
	}
	m := res.rep.meta
	buf, err := c.alloc(ctx, "get", m.Size)
	if err != nil {
		c.release(r, id, false)
		return nil, err
	}
	if m.Size > 0 {
		data := buf.Bytes()[:m.Size]
		cs := c.cfg.ChunkSize
		ops := make([]xfer.Op, 0, (len(data)+cs-1)/cs)
		for off := 0; off < len(data); off += cs {
			ops = append(ops, xfer.Op{Kind: xfer.OpRead, Local: data[off:min(off+cs, len(data))], Remote: at(res.rep.src, off)})
		}
		if err := r.peer.Submit(ops).Wait(ctx); err != nil {
			c.free(buf)
			c.release(r, id, false)
			return nil, fmt.Errorf("reading %d bytes: %w", m.Size, err)
		}
	}
	c.release(r, id, true)
	return &Buffer{c: c, meta: m, buf: buf}, nil
}

// getWrite asks the producer to WRITE the value into a buffer of this
// connector's pool. Without full metadata it first asks for the size. A
// small value comes inline in the answer instead, into that buffer.
func (c *Connector) getWrite(ctx context.Context, r *remote, k string, flags byte, full *Meta) (*Buffer, error) {
	if c.inline && !r.noInline.Load() {
		flags |= flagInline
	}
	if full == nil {
		var id uint32
		res, err := c.call(ctx, r, nil, func(i uint32) []byte { id = i; return appendGet(nil, i, flags|flagWantWrite, k, xfer.RemoteAddr{}, 0) },
			func(res result) {
				if res.err == nil && res.rep.status == statusValue {
					c.release(r, res.rep.id, false)
				}
			})
		if b, done, err := c.answered(ctx, r, id, res, err, xfer.Buffer{}); done {
			return b, err
		}
		if olderProducer(r, flags, res.rep) {
			return c.getWrite(ctx, r, k, flags&^flagInline, full)
		}
		if res.rep.status != statusNeedDest {
			return nil, answerErr(res.rep)
		}
		full = &res.rep.meta
	}
	for range 3 {
		m := *full
		buf, err := c.alloc(ctx, "get", m.Size)
		if err != nil {
			return nil, err
		}
		dest := xfer.RemoteAddr{}
		var destLen uint64
		var dst []byte
		if m.Size > 0 {
			dest, destLen = buf.Remote(), uint64(m.Size)
			if m.Size <= inlineMax {
				dst = buf.Bytes()[:m.Size]
			}
		}
		var id uint32

		res, err := c.call(ctx, r, dst, func(i uint32) []byte { id = i; return appendGet(nil, i, flags|flagDest, k, dest, destLen) },
			func(res result) {
				// Whatever the producer does next no longer touches buf.
				if res.err == nil && (res.notified || res.rep.status == statusOK || res.rep.status == statusValue) {
					c.release(r, id, false)
				}
				if res.err == nil || errors.Is(res.err, xfer.ErrPeerLost) {
					c.free(buf)
				}
			})
		if b, done, err := c.answered(ctx, r, id, res, err, buf); done {
			return b, err
		}
		switch {
		case res.notified, res.rep.status == statusOK:
			c.release(r, id, true)
			// The answer that the value is in place carries no metadata:
			// what the consumer was given (or asked for) describes it.
			return &Buffer{c: c, meta: m, buf: buf}, nil
		case res.rep.status == statusNeedDest:
			// The metadata the consumer was given was wrong about the size.
			c.free(buf)
			full = &res.rep.meta
			continue
		case olderProducer(r, flags, res.rep):
			c.free(buf)
			flags &^= flagInline
			continue
		default:
			c.free(buf)
			return nil, answerErr(res.rep)
		}
	}
	return nil, fmt.Errorf("the producer's value keeps changing size: %w", ErrProtocol)
}

// notFoundIfWaiting marks the error of a get whose ctx ended before the
// producer answered as ErrNotFound too: the key was not put in time (or,
// pulling by write, its transfer had not finished).
func notFoundIfWaiting(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("no value arrived before the get gave up: %w: %w", ErrNotFound, err)
	}
	return err
}

// spinRecv polls ch for up to d (Config.WaitSpin) and reports whether it
// got a result: the caller keeps its thread awake meanwhile, and then waits
// as usual. The clock is read every spinCheck polls.
func spinRecv(ch <-chan result, d time.Duration) (result, bool) {
	start := time.Now()
	for i := 1; ; i++ {
		select {
		case res := <-ch:
			return res, true
		default:
		}
		if i%spinCheck == 0 && time.Since(start) >= d {
			return result{}, false
		}
	}
}

const spinCheck = 32

// getWaiters counts the Gets of the process waiting now on connectors
// that spin (waitSpin).
var getWaiters atomic.Int32

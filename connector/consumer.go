package connector

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// probe asks the producer at addr for a key it cannot hold, without
// waiting, and reports nil when it answers within its share of the call
// bound (callTimeout: it is alive), or why it did not.
func (c *Connector) probe(addr string) error {
	wait := c.probeWait
	ctx, cancel := context.WithTimeout(c.ctx, wait)
	defer cancel()
	r, err := c.dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("a probe could not reach it: %w", err)
	}
	res, err := c.call(ctx, r, nil, func(id uint32) []byte { return appendGet(nil, id, flagNoWait, probeKey, xfer.RemoteAddr{}, 0) },
		func(res result) {
			if res.err == nil && res.rep.status == statusOK {
				c.release(r, res.rep.id, false)
			}
		})
	if err != nil {
		return fmt.Errorf("no answer to a probe within %v: %w", wait, err)
	}
	if res.rep.status == statusOK {
		c.release(r, res.rep.id, false)
	}
	return nil
}

// probeKey is the key of probe's get: one no stage name makes ('/' in a
// stage name is refused).
const probeKey = "/xfer-probe/"

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

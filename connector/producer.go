package connector

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
)

// PutOption changes what a Put does.
type PutOption func(*putOptions)

type putOptions struct {
	consumers int
	retain    bool
	ttl       time.Duration
}

// Consumers makes the value stay until n consumers have taken it (one by
// default). n must be at least 1.
func Consumers(n int) PutOption { return func(o *putOptions) { o.consumers = n } }

// Retain keeps the value for any number of consumers, until Cleanup (or
// the connector's Close); the TTL does not apply.
func Retain() PutOption { return func(o *putOptions) { o.retain, o.ttl = true, -1 } }

// WithTTL overrides Config.TTL for this value: it is reclaimed if not
// taken within d. Negative means never.
func WithTTL(d time.Duration) PutOption { return func(o *putOptions) { o.ttl = d } }

// Put stores v for consumers under (fromStage, toStage, key) and returns
// its size and its metadata, which an orchestrator may hand to the
// consumer's Get. v is a []byte, a Tensor (or *Tensor), a *Buffer from
// AllocBytes or AllocTensor (see PutBuffer), or any other Go value, which
// is stored as an object (EncodeObject). Bytes and tensors are copied into
// the pool once; the value then stays there until its consumers have
// taken it, Cleanup deletes it, the TTL reclaims it, or a Put of the same
// key replaces it.
func (c *Connector) Put(ctx context.Context, fromStage, toStage, key string, v any, opts ...PutOption) (int64, Meta, error) {
	var m Meta
	var data []byte
	switch v := v.(type) {
	case *Buffer:
		return c.PutBuffer(ctx, fromStage, toStage, key, v, opts...)
	case []byte:
		m.Kind, data = KindBytes, v
	case Tensor:
		if err := v.Check(); err != nil {
			return 0, Meta{}, c.putErr(key, err)
		}
		m.Kind, m.DType, m.Shape, data = KindTensor, v.DType, append([]int64(nil), v.Shape...), v.Data
	case *Tensor:
		if v == nil {
			return 0, Meta{}, c.putErr(key, errors.New("nil tensor"))
		}
		return c.Put(ctx, fromStage, toStage, key, *v, opts...)
	default:
		b, err := EncodeObject(v)
		if err != nil {
			return 0, Meta{}, c.putErr(key, err)
		}
		m.Kind, data = KindObject, b
	}
	m.Size = int64(len(data))
	k, err := c.putCheck(fromStage, toStage, key)
	if err != nil {
		return 0, Meta{}, err
	}
	buf, err := c.alloc(ctx, "put", m.Size)
	if err != nil {
		return 0, Meta{}, c.putErr(key, err)
	}
	if m.Size > 0 {
		// Either side may be GPU memory (a pool on a GPU, a tensor on
		// one): the engine copies with the GPU where it must.
		if err := c.eng.Copy(buf.Bytes()[:m.Size], data); err != nil {
			c.free(buf)
			return 0, Meta{}, c.putErr(key, err)
		}
	}
	return c.publish(k, m, buf, opts)
}

// AllocBytes hands out n bytes of the pool, to fill in place and publish
// with PutBuffer without a copy (zero-copy mode). Release it if it is not
// published.
func (c *Connector) AllocBytes(ctx context.Context, n int64) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("connector: alloc: %d bytes", n)
	}
	return c.allocBuffer(ctx, Meta{Kind: KindBytes, Size: n})
}

// AllocTensor hands out the memory of a dtype tensor of the given shape in
// the pool, to fill in place (through Buffer.Tensor and View) and publish
// with PutBuffer without a copy. Release it if it is not published.
func (c *Connector) AllocTensor(ctx context.Context, dtype DType, shape []int64) (*Buffer, error) {
	n, err := ByteSize(dtype, shape)
	if err != nil {
		return nil, fmt.Errorf("connector: alloc: %w", err)
	}
	return c.allocBuffer(ctx, Meta{Kind: KindTensor, Size: n, DType: dtype, Shape: append([]int64(nil), shape...)})
}

func (c *Connector) allocBuffer(ctx context.Context, m Meta) (*Buffer, error) {
	if c.cfg.Role == RoleConsumer {
		return nil, fmt.Errorf("connector: alloc: a consumer does not put: %w", ErrRole)
	}
	buf, err := c.alloc(ctx, "alloc", m.Size)
	if err != nil {
		return nil, err
	}
	return &Buffer{c: c, meta: m, buf: buf}, nil
}

// PutBuffer publishes a buffer from AllocBytes or AllocTensor under
// (fromStage, toStage, key) without copying it, and takes it over: b is
// released whether or not PutBuffer succeeds.
func (c *Connector) PutBuffer(ctx context.Context, fromStage, toStage, key string, b *Buffer, opts ...PutOption) (int64, Meta, error) {
	if b == nil || b.c != c {
		return 0, Meta{}, c.putErr(key, errors.New("the buffer is not from this connector's AllocBytes or AllocTensor"))
	}
	buf, err := b.take()
	if err != nil {
		return 0, Meta{}, c.putErr(key, err)
	}
	k, err := c.putCheck(fromStage, toStage, key)
	if err != nil {
		c.free(buf)
		return 0, Meta{}, err
	}
	m := b.meta
	m.Shape = append([]int64(nil), m.Shape...)
	return c.publish(k, m, buf, opts)
}

func (c *Connector) putCheck(fromStage, toStage, key string) (string, error) {
	if c.cfg.Role == RoleConsumer {
		return "", c.putErr(key, fmt.Errorf("a consumer does not put: %w", ErrRole))
	}
	k, err := slotKey(fromStage, toStage, key)
	if err != nil {
		c.stats.errors.Add(1)
		c.stats.failed(err)
	}
	return k, err
}

func (c *Connector) putErr(key string, err error) error {
	c.stats.errors.Add(1)
	err = fmt.Errorf("connector: put %q: %w", key, err)
	c.stats.failed(err)
	return err
}

// publish stores buf, holding the value m, as the slot k, and serves the
// gets waiting for it.
func (c *Connector) publish(k string, m Meta, buf xfer.Buffer, opts []PutOption) (int64, Meta, error) {
	o := putOptions{consumers: 1, ttl: c.cfg.TTL}
	for _, f := range opts {
		f(&o)
	}
	if o.consumers < 1 && !o.retain {
		c.free(buf)
		return 0, Meta{}, c.putErr(k, fmt.Errorf("Consumers(%d): a value needs at least one consumer (or Retain)", o.consumers))
	}
	if o.retain {
		o.consumers = 0
	}
	m.Producer, m.Key = c.eng.Addr(), k
	s := &slot{key: k, meta: m, buf: buf, left: o.consumers}
	if o.ttl > 0 {
		s.expires = time.Now().Add(o.ttl)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.stats.errors.Add(1)
		return 0, Meta{}, c.errClosed("put")
	}
	if old, ok := c.slots[k]; ok {
		// The new value replaces the old, which consumers moving it now
		// finish first.
		c.dropLocked(old)
	}
	c.slots[k] = s
	c.serveWaitersLocked(s)
	c.mu.Unlock()
	c.stats.succeeded()
	c.stats.puts.Add(1)
	c.stats.bytesPut.Add(m.Size)
	out := m
	out.Shape = append([]int64(nil), m.Shape...)
	return m.Size, out, nil
}

// Cleanup deletes the value stored under (fromStage, toStage, key): no new
// consumer gets it, and its memory is freed once the consumers moving it
// now are done. It reports whether there was such a value.
func (c *Connector) Cleanup(fromStage, toStage, key string) (bool, error) {
	return c.withSlot("cleanup", fromStage, toStage, key, func(s *slot) { c.dropLocked(s) })
}

// Stored reports whether a value is stored under (fromStage, toStage, key)
// now: put, and not yet taken by its consumers, cleaned up or expired.
func (c *Connector) Stored(fromStage, toStage, key string) (bool, error) {
	return c.withSlot("stored", fromStage, toStage, key, nil)
}

// withSlot reports whether a value is stored under the names, and, when
// one is and f is set, runs f on its slot with c.mu held. op names the
// call in its errors.
func (c *Connector) withSlot(op, fromStage, toStage, key string, f func(*slot)) (bool, error) {
	k, err := slotKey(fromStage, toStage, key)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, c.errClosed(op)
	}
	s, ok := c.slots[k]
	if ok && f != nil {
		f(s)
	}
	return ok, nil
}

// dropLocked takes s out of the table, and frees it unless claimed.
func (c *Connector) dropLocked(s *slot) {
	if c.slots[s.key] == s {
		delete(c.slots, s.key)
	}
	s.deleted = true
	if s.claims == 0 {
		c.free(s.buf)
		s.buf = xfer.Buffer{}
	}
}

// endClaimLocked ends a claim: taken says the consumer has the value.
func (c *Connector) endClaimLocked(k claimKey, taken bool) {
	cl, ok := c.claims[k]
	if !ok {
		return
	}
	delete(c.claims, k)
	s := cl.s
	s.claims--
	if taken {
		c.stats.served.Add(1)
		if s.left > 0 {
			s.left--
			if s.left == 0 {
				c.dropLocked(s)
				return
			}
		}
	}
	if s.deleted && s.claims == 0 {
		c.free(s.buf)
		s.buf = xfer.Buffer{}
	}
	if !taken && !s.deleted {
		// The take this claim held is free again: for a get waiting for it.
		c.serveWaitersLocked(s)
	}
}

// serveWaitersLocked serves the gets waiting for s's key that s has a take
// left for.
func (c *Connector) serveWaitersLocked(s *slot) {
	ws := c.wait[s.key]
	if len(ws) == 0 {
		return
	}
	delete(c.wait, s.key)
	var keep []*waiter
	for _, w := range ws {
		if !c.serveLocked(w.peer, w.req, s, false) {
			keep = append(keep, w)
		}
	}
	if len(keep) > 0 {
		c.wait[s.key] = keep
	}
}

// peerGone ends the claims and waits of a consumer whose connection failed:
// it took nothing.
func (c *Connector) peerGone(p *xfer.Peer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lost := false
	for _, ws := range c.wait {
		for _, w := range ws {
			lost = lost || w.peer == p
		}
	}
	for k := range c.claims {
		lost = lost || k.peer == p
	}
	if lost {
		c.stats.peersLost.Add(1)
	}
	// Its waits first, so that ending its claims serves other consumers'.
	for key, ws := range c.wait {
		c.wait[key] = removeWaiters(ws, func(w *waiter) bool { return w.peer == p })
		if len(c.wait[key]) == 0 {
			delete(c.wait, key)
		}
	}
	for k := range c.claims {
		if k.peer == p {
			c.endClaimLocked(k, false)
		}
	}
}

func removeWaiters(ws []*waiter, drop func(*waiter) bool) []*waiter {
	out := ws[:0]
	for _, w := range ws {
		if !drop(w) {
			out = append(out, w)
		}
	}
	return out
}

// reapLoop reclaims slots no consumer took and claims no consumer ended
// within the TTL.
func (c *Connector) reapLoop() {
	tick := min(max(c.cfg.TTL/10, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-t.C:
			c.reap(now)
		}
	}
}

func (c *Connector) reap(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cl := range c.claims {
		if !cl.deadline.IsZero() && now.After(cl.deadline) {
			c.log.Warn("connector: a consumer's claim expired", "key", cl.s.key, "peer", k.peer.String())
			c.stats.expired.Add(1)
			c.endClaimLocked(k, false)
		}
	}
	for _, s := range c.slots {
		if !s.expires.IsZero() && now.After(s.expires) && s.claims == 0 {
			c.log.Warn("connector: no consumer took a value in time; reclaimed", "key", s.key, "bytes", s.meta.Size)
			c.stats.expired.Add(1)
			c.dropLocked(s)
		}
	}
}

// onRequest handles a consumer's message. It runs on the transport's
// receive path: whatever may block goes to a goroutine.
func (c *Connector) onRequest(p *xfer.Peer, req request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The releases a get carries came before it.
	req.eachRelease(func(id uint32, taken bool) {
		carriedReleases.Add(1)
		c.endClaimLocked(claimKey{p, id}, taken)
	})
	req.rels = nil // in the message, which a waiting get outlives
	k := claimKey{p, req.id}
	switch req.typ {
	case msgRelease:
		c.endClaimLocked(k, req.taken)
		return
	case msgSync:
		c.answerLocked(p, req.id, statusSynced, nil, xfer.RemoteAddr{}, "", true)
		return
	case msgCancel:
		for key, ws := range c.wait {
			c.wait[key] = removeWaiters(ws, func(w *waiter) bool { return w.peer == p && w.req.id == req.id })
			if len(c.wait[key]) == 0 {
				delete(c.wait, key)
			}
		}
		return
	}
	switch {
	case c.closed:
		// The engine is closing the connection.
	case c.cfg.Role == RoleConsumer:
		c.answerLocked(p, req.id, statusRefused, nil, xfer.RemoteAddr{}, "this connector is a consumer: it holds no values", true)
	case c.claims[k] != nil:
		c.answerLocked(p, req.id, statusRefused, nil, xfer.RemoteAddr{}, fmt.Sprintf("request %d is already in progress", req.id), true)
	default:
		if s := c.slots[req.key]; s != nil && c.serveLocked(p, req, s, true) {
			return
		}
		if req.flags&flagNoWait != 0 {
			c.answerLocked(p, req.id, statusNotFound, nil, xfer.RemoteAddr{}, fmt.Sprintf("no value under %q at %s", req.key, c.eng.Addr()), true)
			return
		}
		c.wait[req.key] = append(c.wait[req.key], &waiter{peer: p, req: req})
	}
}

// serveLocked answers req from s, and reports false when s has no take
// left for it. onRecv says it runs on p's receive path, which may send
// a small answer itself (answerValueLocked).
func (c *Connector) serveLocked(p *xfer.Peer, req request, s *slot, onRecv bool) bool {
	if !s.available() {
		return false
	}
	if c.inline && inlineOK(req.flags, &s.meta) {
		c.claimLocked(p, req.id, s)
		c.answerValueLocked(p, req.id, s, onRecv)
		return true
	}
	write := req.flags&flagDest != 0
	if write && req.destLen != uint64(s.meta.Size) {
		// The consumer's metadata is wrong about the size: its buffer
		// cannot hold the value, or it would take the value for more bytes
		// than it is. Tell it the size.
		c.answerLocked(p, req.id, statusNeedDest, &s.meta, xfer.RemoteAddr{}, "", onRecv)
		return true
	}
	if !write && req.flags&flagWantWrite != 0 {
		c.answerLocked(p, req.id, statusNeedDest, &s.meta, xfer.RemoteAddr{}, "", onRecv)
		return true
	}
	k := claimKey{p, req.id}
	cl := c.claimLocked(p, req.id, s)
	if !write || s.meta.Size == 0 {
		var src xfer.RemoteAddr
		if s.meta.Size > 0 {
			src = s.buf.Remote()
		}
		c.answerLocked(p, req.id, statusOK, &s.meta, src, "", onRecv)
		return true
	}
	data := s.data()
	c.wg.Go(func() {
		ctx, cancel := c.claimContext(cl)
		defer cancel()
		if err := c.writeValue(ctx, p, data, req.dest, req.id); err != nil {
			c.log.Warn("connector: writing a value to a consumer failed", "key", s.key, "peer", p.String(), "err", err)
			c.stats.failed(fmt.Errorf("writing %q to %s: %w", s.key, p.String(), err))
			c.mu.Lock()
			c.endClaimLocked(k, false)
			c.answerLocked(p, req.id, statusFailed, nil, xfer.RemoteAddr{}, "writing the value failed: "+err.Error(), false)
			c.mu.Unlock()
		}
	})
	return true
}

// carriedReleases counts the releases producers took from gets that
// carried them (tests only look at it).
var carriedReleases atomic.Uint64

// claimLocked claims s for the get id of p.
func (c *Connector) claimLocked(p *xfer.Peer, id uint32, s *slot) *claim {
	cl := &claim{s: s}
	if c.cfg.TTL > 0 {
		cl.deadline = time.Now().Add(c.cfg.TTL)
	}
	s.claims++
	c.claims[claimKey{p, id}] = cl
	return cl
}

// answerValueLocked answers the get id with s's value inline. On p's
// receive path the answer is encoded straight into the transport's send
// queue, where the receive path leaves it to go out with whatever else it
// answers (Peer.TrySendAppend): no goroutine, no message buffer. Elsewhere,
// or when the queue does not take it (rdma), it is encoded here, with its
// copy of the value (the claim keeps the slot, but the TTL may end it),
// and leaves from a goroutine.
func (c *Connector) answerValueLocked(p *xfer.Peer, id uint32, s *slot, onRecv bool) {
	if c.closed {
		return // the engine is closing the connection
	}
	data := s.data()
	if onRecv {
		ok, err := p.TrySendAppend(inlineLen(&s.meta), func(b []byte) []byte {
			out, err := appendValue(b, id, &s.meta, data)
			if err != nil {
				return b // not reached: s.meta was checked when it was put
			}
			return out
		})
		if c.queuedOnRecv(p, ok, err) {
			return
		}
	}
	b, err := appendValue(make([]byte, 0, inlineLen(&s.meta)), id, &s.meta, data)
	if err != nil {
		c.log.Warn("connector: encoding a value's answer failed", "key", s.key, "err", err)
		return
	}
	c.wg.Go(func() {
		if err := c.send(c.ctx, p, b); err != nil && !errors.Is(err, context.Canceled) {
			c.log.Debug("connector: answering a consumer failed", "peer", p.String(), "err", err)
		}
	})
}

// queuedOnRecv takes what p.TrySendAppend returned for an answer on p's
// receive path and reports whether that was the end of it: the queue took
// it, or the connection failed (the consumer's get fails with it; logged).
// False: the caller sends it another way.
func (c *Connector) queuedOnRecv(p *xfer.Peer, ok bool, err error) bool {
	if !ok && err != nil {
		c.log.Debug("connector: answering a consumer failed", "peer", p.String(), "err", err)
		return true
	}
	return ok
}

func (c *Connector) claimContext(cl *claim) (context.Context, context.CancelFunc) {
	if cl.deadline.IsZero() {
		return context.WithCancel(c.ctx)
	}
	return context.WithDeadline(c.ctx, cl.deadline)
}

// answerLocked sends an info answer: m and src go with statusOK, m with
// statusNeedDest, msg with the others. On p's receive path (onRecv) it is
// encoded straight into the transport's send queue where the queue takes
// it (answerValueLocked says why); otherwise, and elsewhere, it leaves from
// a goroutine.
func (c *Connector) answerLocked(p *xfer.Peer, id uint32, status byte, m *Meta, src xfer.RemoteAddr, msg string, onRecv bool) {
	if onRecv && !c.closed {
		var empty Meta
		mm := m
		if mm == nil {
			mm = &empty
		}
		if n := infoLen(status, mm, msg); n <= maxControl {
			ok, err := p.TrySendAppend(n, func(b []byte) []byte {
				out, err := appendInfo(b, id, status, mm, src, msg)
				if err != nil {
					return b // not reached: infoLen said it fits
				}
				return out
			})
			if c.queuedOnRecv(p, ok, err) {
				return
			}
		}
	}
	var meta Meta
	if m != nil {
		meta = *m
		meta.Shape = append([]int64(nil), m.Shape...)
	}
	if c.closed {
		return // the engine is closing the connection
	}
	c.wg.Go(func() {
		b, err := appendInfo(nil, id, status, &meta, src, msg)
		if err == nil {
			err = c.send(c.ctx, p, b)
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.log.Debug("connector: answering a consumer failed", "peer", p.String(), "err", err)
		}
	})
}

// notifyTail is the size of the last piece of a value written to
// a consumer, the one that carries the notification.
const notifyTail = 64 << 10

// writeValue writes data to the consumer's buffer at dest: all but its
// last notifyTail bytes in pieces of ChunkSize (WriteChunkSize by
// default), all in flight together,
// then the last bytes with the notification that tells the consumer the
// value is in place. The notification waits for the pieces, so that it
// cannot overtake one on transports that spread operations over several
// connections; it carries a small tail rather than a whole piece, so that
// the wait costs one round trip and not a piece's worth of transfer
// outside the pipeline.
func (c *Connector) writeValue(ctx context.Context, p *xfer.Peer, data []byte, dest xfer.RemoteAddr, id uint32) error {
	cs := c.cfg.ChunkSize
	if c.chunkAuto {
		cs = WriteChunkSize
	}
	last := len(data) - min(len(data), notifyTail)
	if last > 0 {
		ops := make([]xfer.Op, 0, (last+cs-1)/cs)
		for off := 0; off < last; off += cs {
			ops = append(ops, xfer.Op{Kind: xfer.OpWrite, Local: data[off:min(off+cs, last)], Remote: at(dest, off)})
		}
		if err := p.Submit(ops).Wait(ctx); err != nil {
			return err
		}
	}
	return p.WriteNotify(ctx, data[last:], at(dest, last), id)
}

func at(r xfer.RemoteAddr, off int) xfer.RemoteAddr {
	r.Addr += uint64(off)
	return r
}

package xfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/batch"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// The synchronous operations of a peer: WRITE, READ, write-with-notify
// and SEND, each posted to the peer's endpoint and waited for.

// do runs one operation and waits for it. With metrics, their hooks are
// called on each return path rather than deferred: a deferred closure
// costs more than the metrics' whole budget on a 64-byte shm WRITE.
func (p *Peer) do(ctx context.Context, kind OpKind, local []byte, remote RemoteAddr, imm uint32) error {
	var from string
	var lost error // the first attempt's error, when it is repeated
	for attempt := 0; ; attempt++ {
		tr, err := p.doOnce(ctx, kind, local, remote, imm)
		if err == nil {
			if attempt > 0 {
				p.failedOver(from, tr, kind, attempt)
			}
			return nil
		}
		if attempt == batch.MaxFailovers || !p.repeatable(ctx, kind, err) {
			if lost != nil {
				return fmt.Errorf("%w; repeated on a new connection (%d attempts): %w", lost, attempt+1, err)
			}
			return err
		}
		if attempt == 0 {
			from, lost = tr, err
		}
		p.e.log.Debug("connection lost under an operation; repeating it on a new connection", "peer", p, "op", kind, "transport", tr, "reason", err)
	}
}

// repeatable reports whether an operation of kind that failed with err
// may be posted again, on a new connection: neither the engine nor the
// peer is closing, its connection was lost (not
// stalled: a peer that stopped would stop the new one too, nor down: one
// that refused to reconnect for Config.ReconnectWait), the peer is
// one this engine dialed (it reconnects), the caller still waits, and the
// operation is safe to repeat. A READ is; so is a WRITE, of the same bytes
// (the caller does not touch them while it waits) to the same place.
// WriteNotify and Send are not: the peer may have had the notification or
// the message already.
func (p *Peer) repeatable(ctx context.Context, kind OpKind, err error) bool {
	return (kind == OpWrite || kind == OpRead) && p.dialAddr != "" && ctx.Err() == nil && p.e.ctx.Err() == nil && !p.isClosed() &&
		errors.Is(err, ErrPeerLost) && !errors.Is(err, ErrStalled) && !isReconnectError(err)
}

// isReconnectError reports whether err is a *ReconnectError: the peer is
// down, and a new connection would be refused too.
func isReconnectError(err error) bool {
	var re *ReconnectError
	return errors.As(err, &re)
}

// doOnce is one attempt of do; it also returns the transport it posted on
// ("" when it posted nothing).
func (p *Peer) doOnce(ctx context.Context, kind OpKind, local []byte, remote RemoteAddr, imm uint32) (string, error) {
	b, err := p.endpoint(ctx)
	if err != nil {
		if p.e.metrics != nil {
			p.opFailed(metrics.OpOf(kind), err)
		}
		return "", err
	}
	ep, conn := b.ep, b.conn // conn is nil without metrics
	tr := ep.Transport()
	op := metrics.OpOf(kind)
	c := batch.GetCall()
	var start time.Time
	if conn != nil && c.Timed(conn.Every()) {
		start = time.Now()
	}
	lr, err := p.e.pinLocal(local)
	if err != nil {
		c.Put()
		err = fmt.Errorf("%s: %w", kind, p.e.closedOr(err))
		if conn != nil {
			p.unposted(conn, op, err)
		}
		return tr, err
	}
	if conn != nil {
		conn.Posted(op) // unless the endpoint counts its own
	}
	c.Op.Kind, c.Op.Local, c.Op.Remote, c.Op.Imm, c.Op.Err, c.Op.Region = kind, local, remote, imm, nil, lr
	staged := p.e.staging(ep, &c.Op)
	if staged {
		p.e.postStaged(ep, &c.Op)
	} else {
		ep.Post(c.Ops(), true)
	}
	if wait := c.Wait(); wait == nil {
		// Done already (OpDone ran during the post, or since).
	} else if done := ctx.Done(); done != nil {
		select {
		case <-wait:
		case <-done:
			if staged || !ep.Cancel(&c.Op) {
				if p.abandon(c, lr, local) {
					err = fmt.Errorf("%s: %w (abandoned: the transport still owns the buffer; see Peer.Write)", kind, ctx.Err())
					if conn != nil {
						p.opDone(conn, op, len(local), start, err)
					}
					return tr, err
				}
				<-wait // it completed meanwhile
				break
			}
			c.Put()
			lr.Unpin()
			err = fmt.Errorf("%s: %w", kind, ctx.Err())
			if conn != nil {
				p.opDone(conn, op, len(local), start, err)
			}
			return tr, err
		}
	} else {
		<-wait
	}
	err = c.Op.Err
	if err != nil {
		err = p.stalled(ep, kind, err)
	}
	c.Put()
	lr.Unpin()
	if conn != nil {
		p.opDone(conn, op, len(local), start, err)
	}
	return tr, err
}

// abandon gives up waiting for c's operation, which the transport could
// not take back, unless it completed meanwhile (false: c's channel has its
// token). The operation keeps its region pinned (lr) and, when local lies
// in the engine's pool, its bytes held (mem.Pool.Hold), so that they are
// not handed out again while the transport may still touch them; OpDone
// releases both once the transport is done (the operation completes, or
// its connection fails and flushes it).
func (p *Peer) abandon(c *batch.Call, lr *mem.Handle, local []byte) bool {
	release, _ := p.e.pool.Hold(local)
	return c.Abandon(lr, release)
}

// Write copies src, which must lie in registered memory, to the peer's
// memory at dst, and returns once it is in place.
//
// When ctx ends first, Write returns ctx's error at once. The transport
// takes the operation back where it can (tcp and shm: one not yet sent).
// Where it cannot (rdma, whose NIC owns posted work; over tcp, a WRITE of
// 64 KiB or more from memfd-backed memory, which leaves by reference, the
// kernel reading src until the peer has it), the operation is abandoned:
// it goes on without the caller until it completes or its connection
// fails (Config.OpTimeout bounds that), and the bytes at dst are then
// undefined. Until then the engine keeps src's region registered and,
// for the engine's pool, keeps src's bytes from being handed out again,
// even once their Buffer is freed. So after an abandoned call, free the
// Buffer rather than reuse it; memory of a region of your own must not be
// reused until the region's Close returns (Close waits for the operation).
// The same holds for Read's dst, which the NIC may still write into, and
// for WriteNotify and Send.
func (p *Peer) Write(ctx context.Context, src []byte, dst RemoteAddr) error {
	return p.do(ctx, OpWrite, src, dst, 0)
}

// Read copies the peer's memory at src into dst, which must lie in
// registered memory.
func (p *Peer) Read(ctx context.Context, dst []byte, src RemoteAddr) error {
	return p.do(ctx, OpRead, dst, src, 0)
}

// WriteNotify is Write, and then the peer receives a Notification carrying
// value (Engine.WaitNotify) once the data is in place.
func (p *Peer) WriteNotify(ctx context.Context, src []byte, dst RemoteAddr, value uint32) error {
	return p.do(ctx, OpWriteNotify, src, dst, value)
}

// Send delivers msg as one message to the peer's receive queue (Peer.Recv on
// the other side). Messages arrive in order. Send waits while the peer's
// queue is full. msg must lie in registered memory and be at most the
// negotiated max_message.
func (p *Peer) Send(ctx context.Context, msg []byte) error {
	return p.do(ctx, OpSend, msg, RemoteAddr{}, 0)
}

// TrySendAppend sends one message that fill appends to b, encoded straight
// into the transport's send queue (over rdma, into a send buffer
// registered with the connection): no buffer of the pool, no batch, no
// wait for a completion. It is the fast path of small request/response
// protocols such as the kv package's and the connector's.
//
// It reports false, without calling fill, when the message cannot go that
// way at once: while no connection is up, with no receive credit left at
// the peer, with every rdma send buffer in flight, or with max above the
// transport's limit for such messages (16 KiB). The caller then
// sends the message with Send. fill must append at most max bytes, must
// not block, and must not call the peer's methods. An error means the
// connection failed, or fill appended more than max bytes; nothing was sent.
func (p *Peer) TrySendAppend(max int, fill func(b []byte) []byte) (bool, error) {
	ep := p.current()
	if ep == nil {
		return false, nil // Send dials
	}
	select {
	case <-ep.Done():
		return false, nil // Send redials, or words the failure
	default:
	}
	a, ok := ep.(transport.Appender)
	if !ok {
		return false, nil
	}
	return a.AppendSend(max, fill)
}

// unposted counts an operation of kind op on connection c that failed
// before it was posted, and its failure.
func (p *Peer) unposted(c *metrics.Conn, op metrics.Op, err error) {
	if c != nil {
		c.Ops[op].Add(1)
	}
	p.opFailed(op, err)
}

// opDone records the end of an operation of kind op, of n bytes, posted
// on connection c (nil when it never connected), started at start (zero:
// not timed): its latency, its bytes unless the endpoint counts them, or
// its failure.
func (p *Peer) opDone(c *metrics.Conn, op metrics.Op, n int, start time.Time, err error) {
	if err != nil {
		p.opFailed(op, err)
		return
	}
	if c == nil {
		return
	}
	if !start.IsZero() {
		c.Observe(op, start)
	}
	c.Moved(op, n)
}

// isClosed reports whether the peer was closed.
func (p *Peer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

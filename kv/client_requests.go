package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// requestSize bounds the encoded size of a GET or inline PUT request
// whose fields (key, buffer descriptor or value, server id) are that long:
// each field, and the id and the operation's header, take at most a tag and
// a 10-byte varint besides their bytes.
func requestSize(fields ...int) int {
	n := 2 * (1 + 10)
	for _, f := range fields {
		n += 1 + 10 + f
	}
	return n + 2*(1+10) // inline max, or room to spare
}

// callPool holds the pendingCalls of GETs and inline PUTs, each with its
// channel.
var callPool = sync.Pool{New: func() any {
	pc := &pendingCall{ch: make(chan *kvpb.Response, 1)}
	pc.fill, pc.encGet, pc.encPut = pc.appendRequest, pc.appendGet, pc.appendPut
	return pc
}}

// appendGet appends the call's GET request (a pooled call's fields).
func (pc *pendingCall) appendGet(b []byte, id uint64) []byte {
	return appendGetRequest(b, id, pc.key, pc.reqBytes, pc.inlineMax, pc.sid, true)
}

// appendPut appends the call's inline PUT request.
func (pc *pendingCall) appendPut(b []byte, id uint64) []byte {
	return appendPutRequest(b, id, pc.key, pc.reqBytes, pc.sid)
}

// clearRequest drops what a pooled call's request referred to.
func (pc *pendingCall) clearRequest() {
	pc.key, pc.reqBytes, pc.sid, pc.inlineMax = nil, nil, nil, 0
}

// errLate marks a call abandoned while the server might still use the
// caller's buffer; whoever frees the buffer was handed over to run later.
var errLate = errors.New("the buffer is released once the server has answered")

// lateGRPC is how long a buffer of an abandoned gRPC GET stays allocated.
const lateGRPC = 5 * time.Second

// clientMsgBufs is the number of data-plane requests a client can have in
// flight at once.
const clientMsgBufs = 64

// onResponse handles a response on sess's data-plane connection; it runs on
// the transport's receive path (Peer.Handle). An inline GET value is copied
// into the caller's buffer here, while msg is valid.
func (c *Client) onResponse(sess *session, msg []byte) {
	var resp *kvpb.Response
	var value []byte // an inline GET value
	fast, ok := parseGetResponse(msg)
	var fastPut fastPutResponse
	isPut := false
	switch {
	case ok:
		value = fast.value
	default:
		if fastPut, isPut = parsePutResponse(msg); isPut {
			fast.id = fastPut.id
			break
		}
		resp = new(kvpb.Response)
		if err := proto.Unmarshal(msg, resp); err != nil {
			return // not a response to anything: ignore it
		}
		if g := resp.GetGet(); g != nil {
			value, g.Value = g.Value, nil
		}
		fast.id = resp.Id
	}
	sess.pmu.Lock()
	pc := sess.pending[fast.id]
	delete(sess.pending, fast.id)
	sess.pmu.Unlock()
	if pc == nil {
		return
	}
	switch {
	case ok:
		pc.get.Reset()
		pc.get.Length, pc.get.Version, pc.get.Inline = fast.length, fast.version, fast.inline
		pc.wrap.Get = &pc.get
		resp = pc.fastResponse(fast.id)
		resp.Result = &pc.wrap
	case isPut:
		pc.put.Reset()
		pc.put.Version, pc.put.Evicted = fastPut.version, fastPut.evicted
		pc.wrapPut.Put = &pc.put
		resp = pc.fastResponse(fastPut.id)
		resp.Result = &pc.wrapPut
	}
	if g := resp.GetGet(); g != nil && g.Inline && pc.late == nil {
		if len(value) != int(g.Length) || len(value) > len(pc.dst) {
			resp = &kvpb.Response{Id: resp.Id, Code: uint32(codes.Internal),
				Message: fmt.Sprintf("server sent an inline value of %d bytes for a length of %d and a buffer of %d", len(value), g.Length, len(pc.dst))}
		} else {
			copy(pc.dst, value)
		}
	}
	pc.deliver(resp)
}

// onNotify handles the notification that answers a GET whose value the
// server wrote into the caller's buffer (GetRequest.notify); it runs on the
// transport's receive path, after the value is in place. The notification
// carries the low 32 bits of the call's id: the calls in flight are the
// last few ids.
func (c *Client) onNotify(sess *session, n xfer.Notification) {
	sess.pmu.Lock()
	id := sess.nextID - uint64(uint32(sess.nextID)-n.Value)
	pc := sess.pending[id]
	if pc == nil || !pc.notify {
		sess.pmu.Unlock()
		return // not an answer to anything: ignore it
	}
	delete(sess.pending, id)
	sess.pmu.Unlock()
	resp := pc.fastResponse(id)
	if n.Len > uint64(len(pc.dst)) {
		resp.Code = uint32(codes.Internal)
		resp.Message = fmt.Sprintf("server notified a value of %d bytes for a buffer of %d", n.Len, len(pc.dst))
	} else {
		pc.get.Reset()
		pc.get.Length = n.Len
		pc.wrap.Get = &pc.get
		resp.Result = &pc.wrap
	}
	pc.deliver(resp)
}

func (pc *pendingCall) appendRequest(b []byte) []byte { return pc.enc(b, pc.id) }

// fastResponse returns the call's own Response, reset, for a response of
// the fast path.
func (pc *pendingCall) fastResponse(id uint64) *kvpb.Response {
	pc.resp.Reset()
	pc.resp.Id = id
	return &pc.resp
}

func (pc *pendingCall) deliver(r *kvpb.Response) {
	if pc.late != nil {
		pc.late()
		return
	}
	pc.ch <- r
}

// call sends req on the data plane and waits for its response, which it
// returns as the gRPC handler's result would be: a status error when the
// server refused. If ctx ends first and late is not nil, call returns an
// error matching errLate and runs late once the server is done with the
// request (its response came, or the connection failed).
//
// dst, when not nil, receives the value of an inline GET response.
func (c *Client) call(ctx context.Context, sess *session, req *kvpb.Request, dst []byte, late func()) (*kvpb.Response, error) {
	return c.callEnc(ctx, sess, func(b []byte, id uint64) []byte {
		req.Id = id
		out, err := proto.MarshalOptions{}.MarshalAppend(b, req)
		if err != nil {
			return nil
		}
		return out
	}, dst, late)
}

// callEnc is call with a request that enc appends to a message buffer,
// given the request's id.
func (c *Client) callEnc(ctx context.Context, sess *session, enc func(b []byte, id uint64) []byte, dst []byte, late func()) (*kvpb.Response, error) {
	r, _, err := c.callWith(ctx, sess, &pendingCall{ch: make(chan *kvpb.Response, 1), dst: dst}, enc, late)
	return r, err
}

// callWith is callEnc with the call pc. It reports done when nothing
// refers to pc any more (its response came and was taken from pc.ch, or it
// never went out): a pooled pc may then be reused once its caller is done
// with the response.
func (c *Client) callWith(ctx context.Context, sess *session, pc *pendingCall, enc func(b []byte, id uint64) []byte, late func()) (_ *kvpb.Response, done bool, _ error) {
	if err := ctx.Err(); err != nil {
		// Ended before it began: nothing is sent. (Sent, a fast server's
		// answer could race ctx's end, and either could win.)
		return nil, true, err
	}
	select {
	case <-sess.peer.Down():
		// Not sent: the peer's engine would redial the session's data
		// address, which a restarted server may no longer have. The
		// caller says Hello again instead.
		return nil, true, status.Error(codes.Unavailable, "data-plane connection lost")
	default:
	}
	sess.pmu.Lock()
	if sess.down != nil {
		sess.pmu.Unlock()
		return nil, true, status.Errorf(codes.Unavailable, "data-plane connection: %v", sess.down)
	}
	sess.nextID++
	id := sess.nextID
	sess.pending[id] = pc
	sess.pmu.Unlock()
	sent, err := false, error(nil)
	if pc.size > 0 {
		// Encoded straight into the transport's send queue, if it takes
		// the request there (tcp, shm).
		pc.enc, pc.id = enc, id
		if pc.fill == nil {
			pc.fill = pc.appendRequest
		}
		sent, err = sess.peer.TrySendAppend(pc.size, pc.fill)
		pc.enc = nil
	}
	if !sent && err == nil {
		err = c.sendBuffered(ctx, sess, enc, id)
	}
	down := sess.peer.Down()
	if err != nil {
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		delete(sess.pending, id)
		sess.pmu.Unlock()
		// Unless it was still waiting, a response may be in pc.ch.
		if ctx.Err() != nil {
			return nil, waiting, ctx.Err()
		}
		if errors.Is(err, xfer.ErrPeerLost) {
			// Its engine could not reconnect (a *xfer.ReconnectError:
			// the server is down): keep the cause for retry.
			return nil, waiting, fmt.Errorf("kv: data-plane request: %w: %w", ErrUnavailable, err)
		}
		return nil, waiting, status.Errorf(codes.Unavailable, "data-plane request: %v", err)
	}
	select {
	case r := <-pc.ch:
		if r == nil {
			return nil, true, status.Error(codes.Unavailable, "data-plane connection lost")
		}
		r, err := result(r)
		return r, true, err
	case <-down:
		// The connection failed with the request unanswered. The server
		// is done with the caller's buffer: its connection is gone too.
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		if waiting {
			pc.late = func() {}
		}
		sess.pmu.Unlock()
		if !waiting {
			if r := <-pc.ch; r != nil {
				r, err := result(r)
				return r, true, err
			}
		}
		return nil, !waiting, status.Error(codes.Unavailable, "data-plane connection lost")
	case <-ctx.Done():
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		if waiting {
			pc.late = func() {}
			if late != nil {
				pc.late = late // runs when the response arrives
			}
		}
		sess.pmu.Unlock()
		if !waiting {
			<-pc.ch // being delivered right now: the server is done
			return nil, true, ctx.Err()
		}
		if late != nil {
			return nil, false, fmt.Errorf("%w: %w", ctx.Err(), errLate)
		}
		return nil, false, ctx.Err()
	}
}

// getMsg takes a request buffer: one of the client's own, or of the
// shared ones within its share.
func (c *Client) getMsg(ctx context.Context) ([]byte, error) {
	if c.msgShare != nil {
		select {
		case c.msgShare <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b, err := c.msgs.get(ctx)
	if err != nil && c.msgShare != nil {
		<-c.msgShare
	}
	return b, err
}

// putMsg gives back a buffer getMsg took.
func (c *Client) putMsg(b []byte) {
	c.msgs.put(b)
	if c.msgShare != nil {
		<-c.msgShare
	}
}

// sendBuffered sends the request enc encodes from one of the client's
// message buffers.
func (c *Client) sendBuffered(ctx context.Context, sess *session, enc func(b []byte, id uint64) []byte, id uint64) error {
	b, err := c.getMsg(ctx)
	if err != nil {
		return err
	}
	defer c.putMsg(b)
	out := enc(b[:0], id)
	if out == nil || cap(out) != cap(b) {
		return fmt.Errorf("kv: request of %d bytes does not fit a message of %d", len(out), cap(b))
	}
	return sess.peer.Send(ctx, out)
}

// result returns r, or the status error it carries.
func result(r *kvpb.Response) (*kvpb.Response, error) {
	if r.Code == 0 {
		return r, nil
	}
	st := status.New(codes.Code(r.Code), r.Message)
	if r.TooSmall != nil {
		if d, err := st.WithDetails(r.TooSmall); err == nil {
			st = d
		}
	}
	if r.Detail != nil {
		if d, err := st.WithDetails(r.Detail); err == nil {
			st = d
		}
	}
	return nil, st.Err()
}

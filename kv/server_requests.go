package kv

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// acceptLoop accepts clients' data-plane connections and watches each until
// it goes away.
func (s *Server) acceptLoop(e *xfer.Engine, msgs *msgBufs) {
	for {
		p, err := e.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, xfer.ErrClosed) {
				return
			}
			s.log.Warn("kv: data-plane handshake failed", "err", err)
			continue
		}
		s.log.Debug("kv: client connected", "peer", p, "transport", p.Transport())
		s.peers.set(p)
		s.wg.Go(func() { s.serveMessages(p, msgs) })
	}
}

// serveMessages serves the requests p, a client's connection, sends on the
// data plane (see kvpb.Request) until it goes down, then forgets it. The
// requests arrive on the transport's receive path (Peer.Handle): a GET the
// server answers inline is answered right there, anything that may wait (a
// one-sided transfer, a full pool) gets a goroutine.
func (s *Server) serveMessages(p *xfer.Peer, msgs *msgBufs) {
	var wg sync.WaitGroup
	ans := newAnswer()
	p.Handle(func(msg []byte) {
		if g, ok := parseGetRequest(msg); ok && s.serveSmallGet(p, msgs, ans, g.id, g.key, g.inlineMax, g.serverID) {
			return
		}
		if r, ok := parsePutRequest(msg); ok {
			s.serveInlinePut(p, msgs, ans, r)
			return
		}
		req := new(kvpb.Request)
		if err := proto.Unmarshal(msg, req); err != nil {
			// The id is unknown: the client's call waits for its deadline.
			s.log.Warn("kv: malformed data-plane request", "peer", p, "bytes", len(msg), "err", err)
			return
		}
		if !mayWait(req) {
			// Answered from memory: no goroutine.
			resp := s.serveRequest(p, req) // not nil: not a GET
			if b, ok := msgs.tryGet(); ok {
				if out, ok := s.marshal(b, resp); ok {
					s.sendNow(p, msgs, b, out)
				} else {
					msgs.put(b)
				}
				return
			}
			wg.Go(func() { s.send(p, msgs, resp) })
			return
		}
		wg.Go(func() { s.send(p, msgs, s.serveRequest(p, req)) })
	})
	select {
	case <-p.Down():
	case <-s.ctx.Done():
	}
	s.peers.drop(p)
	p.Close()
	wg.Wait()
	s.log.Debug("kv: client gone", "peer", p)
}

// mayWait reports whether serving req may wait: a one-sided transfer (a
// GET into a buffer, a PUT from one). DELETEs, inline PUTs and malformed
// requests are answered from memory at once.
func mayWait(req *kvpb.Request) bool {
	switch op := req.Op.(type) {
	case *kvpb.Request_Get:
		return true
	case *kvpb.Request_Put:
		_, inline := op.Put.Source.(*kvpb.PutRequest_Value)
		return !inline
	}
	return false
}

// answer encodes the response of an inline GET or PUT straight into the
// transport's send queue (Peer.TrySendAppend): one copy of the value, from
// its slot into the queue, and no message buffer. A connection has one,
// reused for each request: its handler runs one message at a time.
type answer struct {
	id, version uint64
	value       []byte // a GET's value
	evicted     uint32 // a PUT's evictions
	get         bool
	fill        func(b []byte) []byte // a.append, bound once
}

func newAnswer() *answer {
	a := new(answer)
	a.fill = a.append
	return a
}

func (a *answer) append(b []byte) []byte {
	if a.get {
		return appendGetResponse(b, a.id, uint64(len(a.value)), a.version, true, a.value)
	}
	return appendPutResponse(b, a.id, a.version, a.evicted)
}

// answerOverhead bounds what a Response adds to an inline GET's value: the
// id, the GetResponse's header, length, version, inline flag and the
// value's header, each at most a tag and a 10-byte varint.
const answerOverhead = 6 * (1 + 10)

// send sends the answer through the send queue, if the transport takes it
// there at once; false leaves it to a message buffer.
func (a *answer) send(s *Server, p *xfer.Peer) bool {
	ok, err := p.TrySendAppend(len(a.value)+answerOverhead, a.fill)
	a.value = nil
	if err != nil {
		// The connection failed (its client's calls fail with it), or the
		// bound is wrong: the buffered path then sends, or fails alike.
		s.log.Debug("kv: send response", "peer", p, "err", err)
	}
	return ok
}

// serveSmallGet answers g at once when the answer needs no data-plane
// transfer: the value inline, straight from its slot into the response. It
// reports whether it answered.
func (s *Server) serveSmallGet(p *xfer.Peer, msgs *msgBufs, ans *answer, id uint64, key []byte, inlineMax uint64, serverID []byte) bool {
	if s.checkSession(serverID) != nil || s.checkKey(key) != nil {
		return false // the full path words the error
	}
	sl, inMem := s.fence.Load().acquire(s.st, key)
	if sl == nil {
		return false
	}
	defer s.st.release(sl)
	if !inMem {
		return false // only on disk: the full path loads it
	}
	n := uint64(sl.n)
	if n > inlineMax || int(n) > s.inlineMax(p.Transport()) {
		return false
	}
	s.gets.Add(1)
	s.hits.Add(1)
	s.inlineBytes.Add(n)
	s.inlineReqs.Add(1)
	ans.id, ans.version, ans.value, ans.get = id, sl.ver, sl.value(), true
	if ans.send(s, p) {
		return true
	}
	b, ok := msgs.tryGet()
	if !ok {
		// Every buffer is busy: answer from a goroutine that can wait.
		r := &kvpb.Response{Id: id, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: n, Version: sl.ver, Inline: true, Value: bytes.Clone(sl.value())}}}
		s.wg.Go(func() { s.send(p, msgs, r) })
		return true
	}
	// Straight from the slot into the message, before the slot is released.
	out := appendGetResponse(b[:0], id, n, sl.ver, true, sl.value())
	if cap(out) != cap(b) {
		msgs.put(b)
		return false // cannot happen: messages are sized for inline values
	}
	s.sendNow(p, msgs, b, out)
	return true
}

// serveInlinePut answers a PUT whose value came inline, at once: the
// handler copies the value from the message, where it lies, into its slot,
// and the response is encoded by hand, into the send queue when the
// transport takes it there. Unlike proto.Unmarshal, nothing copies the
// value or allocates the request on the way. When every message buffer is
// busy (and the queue refused), a goroutine sends the response.
func (s *Server) serveInlinePut(p *xfer.Peer, msgs *msgBufs, ans *answer, r fastPut) {
	src := kvpb.PutRequest_Value{Value: r.value}
	req := kvpb.PutRequest{Key: r.key, Source: &src, ServerId: r.serverID}
	ver, evicted, err := s.putValue(s.ctx, &req) // an inline PUT needs no peer (fromPeer)
	if err == nil {
		ans.id, ans.version, ans.evicted, ans.get = r.id, ver, evicted, false
		if ans.send(s, p) {
			return
		}
	}
	b, ok := msgs.tryGet()
	if !ok {
		er := &kvpb.Response{Id: r.id}
		if err == nil {
			er.Result = &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: ver, Evicted: evicted}}
		} else {
			setError(er, err)
		}
		s.wg.Go(func() { s.send(p, msgs, er) })
		return
	}
	var out []byte
	if err == nil {
		out = appendPutResponse(b[:0], r.id, ver, evicted)
		ok = cap(out) == cap(b)
	} else {
		er := &kvpb.Response{Id: r.id}
		setError(er, err)
		out, ok = s.marshal(b, er)
	}
	if !ok {
		msgs.put(b) // cannot happen: messages are sized for inline values
		return
	}
	s.sendNow(p, msgs, b, out)
}

// serveRequest runs one data-plane request through the gRPC handlers and
// returns the response: nil for a GET its notification answered.
func (s *Server) serveRequest(p *xfer.Peer, req *kvpb.Request) *kvpb.Response {
	ctx := context.WithValue(s.ctx, fromPeer{}, p)
	resp := &kvpb.Response{Id: req.Id}
	var err error
	switch op := req.Op.(type) {
	case *kvpb.Request_Get:
		var r *kvpb.GetResponse
		var notified bool
		if r, notified, err = s.get(ctx, op.Get, req.Id, op.Get.Notify); notified {
			return nil // the notification answered (only GETs, which send)
		} else if err == nil {
			resp.Result = &kvpb.Response_Get{Get: r}
		}
	case *kvpb.Request_Put:
		var r *kvpb.PutResponse
		if r, err = s.put(ctx, op.Put); err == nil {
			resp.Result = &kvpb.Response_Put{Put: r}
		}
	case *kvpb.Request_Delete:
		var r *kvpb.DeleteResponse
		if r, err = s.delete(op.Delete); err == nil {
			resp.Result = &kvpb.Response_Delete{Delete: r}
		}
	default:
		err = status.Error(codes.InvalidArgument, "request without an operation")
	}
	if err != nil {
		setError(resp, err)
	}
	return resp
}

// setError makes resp carry err, a handler's status error.
func setError(resp *kvpb.Response, err error) {
	st := status.Convert(err)
	resp.Code, resp.Message = uint32(st.Code()), st.Message()
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *kvpb.BufferTooSmall:
			resp.TooSmall = d
		case *kvpb.ErrorDetail:
			resp.Detail = d
		}
	}
}

// send sends resp to p, waiting for a message buffer if need be; nil is a
// request answered otherwise (a GET's notification).
func (s *Server) send(p *xfer.Peer, msgs *msgBufs, resp *kvpb.Response) {
	if resp == nil {
		return
	}
	b, err := msgs.get(s.ctx)
	if err != nil {
		return // shutting down
	}
	if out, ok := s.marshal(b, resp); ok {
		if err := p.Send(s.ctx, out); err != nil {
			s.log.Debug("kv: send response", "peer", p, "err", err)
		}
	}
	msgs.put(b)
}

// sendNow sends out, encoded in message buffer b, to p without waiting, for
// the receive path: a send that cannot complete at once (no credit, a full
// socket) finishes in a goroutine of its own, which keeps b until then.
func (s *Server) sendNow(p *xfer.Peer, msgs *msgBufs, b, out []byte) {
	batch := p.Submit([]xfer.Op{{Kind: xfer.OpSend, Local: out}})
	if batch.Done() {
		msgs.put(b)
		return
	}
	s.wg.Go(func() {
		batch.Wait(context.Background()) // a send always completes, or fails with its connection
		msgs.put(b)
	})
}

// marshal encodes resp at the start of b; false (logged) if it does not fit.
func (s *Server) marshal(b []byte, resp *kvpb.Response) ([]byte, bool) {
	out, err := proto.MarshalOptions{}.MarshalAppend(b[:0], resp)
	if err != nil || cap(out) != cap(b) {
		s.log.Error("kv: response does not fit a message", "bytes", len(out), "limit", cap(b), "err", err)
		return nil, false
	}
	return out, true
}

// msgSize is the message size the data-plane request path needs: a key, an
// inline value and the rest of the request, rounded up to 4 KiB.
func msgSize(maxKey, inlineMax int) int {
	return (max(inlineMax, 0) + maxKey + 1024 + 4095) &^ 4095
}

// serverMsgBufs is the number of responses each engine can send at once.
const serverMsgBufs = 64

// Package masterdata carries the calls of Mooncake's store master (package
// mooncake/master) on the xfer data plane, beside its gRPC service: a store
// client that already runs an xfer engine sends each call as one message on
// an engine connection to the master's own engine, and the master answers
// on the same connection, from its receive path. A gRPC unary call on
// loopback costs this host about 100 µs; a message round trip on an engine
// connection about 15 µs, which is the floor of every get and twice that
// of every put.
//
// A frame is one byte naming the call (the op constants), the call's
// number (8 bytes, little-endian; the answer carries the caller's), and the
// masterpb request or response, protobuf-encoded. An answer sets the op's
// top bit. A frame that does not decode is dropped and logged (the caller's
// call then ends at its deadline); an unknown op is answered with an empty
// frame of op opUnknown, so that the caller fails at once.
//
// Authentication is the engine's: with a shared secret, the master's
// engine accepts only peers that prove it in the handshake, so every
// message on the connection comes from a holder of the secret.
//
// Client implements masterpb.MasterClient, so the store client uses either
// transport through one interface; Serve answers with any
// masterpb.MasterServer.
package masterdata

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// The calls, as a frame's first byte names them.
const (
	opMount byte = iota + 1
	opUnmount
	opPing
	opPutStart
	opPutEnd
	opPutRevoke
	opGetReplicaList
	opExist
	opRemove
	opRemoveByRegex
	opRemoveAll
	opLast = opRemoveAll

	// opAnswer marks an answer.
	opAnswer byte = 0x80
	// opUnknown answers an op the master does not know.
	opUnknown byte = 0xff
	// opTooLarge answers a call whose answer would not fit a message: the
	// caller makes it again on gRPC.
	opTooLarge byte = 0xfe
)

// headerLen is a frame's op and call number.
const headerLen = 9

// MaxFrame bounds a frame: within the engines' default max_message (64
// KiB). A call or an answer that does not fit (a batch of many keys) goes
// on gRPC instead (Options.Fallback).
const MaxFrame = 60 << 10

// errFallback sends a call to gRPC.
var errFallback = errors.New("mooncake master: a call too large for the data plane")

// ErrUnknownCall is an answer from a master that does not know the call
// (an older one).
var ErrUnknownCall = errors.New("mooncake master: call unknown to the master's data plane")

// ErrRefused is a call the master refused (a standby of a leader and
// standby pair): the Client closes, and calls go to gRPC, which follows
// the leader.
var ErrRefused = errors.New("mooncake master: call refused")

// appendFrame appends a frame of op and id holding m.
func appendFrame(b []byte, op byte, id uint64, m proto.Message) ([]byte, error) {
	b = append(b, op)
	b = binary.LittleEndian.AppendUint64(b, id)
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

// parseHeader splits a frame.
func parseHeader(msg []byte) (op byte, id uint64, body []byte, err error) {
	if len(msg) < headerLen {
		return 0, 0, nil, fmt.Errorf("mooncake master: a frame of %d bytes, shorter than its %d-byte header", len(msg), headerLen)
	}
	return msg[0], binary.LittleEndian.Uint64(msg[1:headerLen]), msg[headerLen:], nil
}

// request is a new request message of op.
func request(op byte) proto.Message {
	switch op {
	case opMount:
		return new(masterpb.MountSegmentRequest)
	case opUnmount:
		return new(masterpb.UnmountSegmentRequest)
	case opPing:
		return new(masterpb.PingRequest)
	case opPutStart:
		return new(masterpb.PutStartRequest)
	case opPutEnd, opPutRevoke:
		return new(masterpb.PutEndRequest)
	case opGetReplicaList, opExist:
		return new(masterpb.KeysRequest)
	case opRemove:
		return new(masterpb.RemoveRequest)
	case opRemoveByRegex:
		return new(masterpb.RemoveByRegexRequest)
	case opRemoveAll:
		return new(masterpb.RemoveAllRequest)
	}
	return nil
}

// decodeRequest reads a call's frame: its op, number and request. An op
// it does not know is ErrUnknownCall (with the number, to answer it).
func decodeRequest(msg []byte) (op byte, id uint64, req proto.Message, err error) {
	op, id, body, err := parseHeader(msg)
	if err != nil {
		return 0, 0, nil, err
	}
	if req = request(op); req == nil {
		return op, id, nil, fmt.Errorf("%w: op %d", ErrUnknownCall, op)
	}
	if err := proto.Unmarshal(body, req); err != nil {
		return op, id, nil, fmt.Errorf("mooncake master: op %d: %w", op, err)
	}
	return op, id, req, nil
}

// dispatch runs request req of op on s.
func dispatch(ctx context.Context, s masterpb.MasterServer, op byte, req proto.Message) (proto.Message, error) {
	switch op {
	case opMount:
		return s.MountSegment(ctx, req.(*masterpb.MountSegmentRequest))
	case opUnmount:
		return s.UnmountSegment(ctx, req.(*masterpb.UnmountSegmentRequest))
	case opPing:
		return s.Ping(ctx, req.(*masterpb.PingRequest))
	case opPutStart:
		return s.PutStart(ctx, req.(*masterpb.PutStartRequest))
	case opPutEnd:
		return s.PutEnd(ctx, req.(*masterpb.PutEndRequest))
	case opPutRevoke:
		return s.PutRevoke(ctx, req.(*masterpb.PutEndRequest))
	case opGetReplicaList:
		return s.GetReplicaList(ctx, req.(*masterpb.KeysRequest))
	case opExist:
		return s.Exist(ctx, req.(*masterpb.KeysRequest))
	case opRemove:
		return s.Remove(ctx, req.(*masterpb.RemoveRequest))
	case opRemoveByRegex:
		return s.RemoveByRegex(ctx, req.(*masterpb.RemoveByRegexRequest))
	case opRemoveAll:
		return s.RemoveAll(ctx, req.(*masterpb.RemoveAllRequest))
	}
	return nil, ErrUnknownCall
}

// slow reports whether op may take long (a walk over every key): it runs
// on a goroutine of its own, off the receive path.
func slow(op byte) bool { return op == opRemoveByRegex || op == opRemoveAll }

// Serve answers the calls that peers of e send, with s, until ctx ends or
// e closes. Each peer's calls are answered from its receive path (a
// regex or remove-all walk on a goroutine), in order.
func Serve(ctx context.Context, e *xfer.Engine, s masterpb.MasterServer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		p, err := e.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, xfer.ErrClosed) {
				return nil
			}
			log.Warn("mooncake master: data-plane handshake failed", "err", err)
			continue
		}
		p.Handle(func(msg []byte) { serveFrame(ctx, e, p, s, log, msg, &wg) })
	}
}

// serveFrame answers one frame from p.
func serveFrame(ctx context.Context, e *xfer.Engine, p *xfer.Peer, s masterpb.MasterServer, log *slog.Logger, msg []byte, wg *sync.WaitGroup) {
	op, id, req, err := decodeRequest(msg)
	switch {
	case errors.Is(err, ErrUnknownCall):
		answer(ctx, e, p, log, opUnknown, id, &masterpb.CodeResponse{})
		return
	case err != nil:
		log.Warn("mooncake master: malformed data-plane request", "peer", p, "bytes", len(msg), "err", err)
		return
	}
	run := func() {
		resp, err := dispatch(ctx, s, op, req)
		if err != nil {
			// The service refuses with a gRPC status only for a caller it
			// does not serve (not the leader); the caller falls back to gRPC.
			answer(ctx, e, p, log, opUnknown, id, &masterpb.CodeResponse{Message: err.Error()})
			return
		}
		answer(ctx, e, p, log, op|opAnswer, id, resp)
	}
	if slow(op) {
		wg.Go(run)
		return
	}
	run()
}

// answer sends an answer frame to p: on its send queue if there is room,
// else from a goroutine that waits for room. An answer too large for a
// message tells the caller to ask on gRPC.
func answer(ctx context.Context, e *xfer.Engine, p *xfer.Peer, log *slog.Logger, op byte, id uint64, m proto.Message) {
	if headerLen+proto.Size(m) > MaxFrame {
		op, m = opTooLarge, &masterpb.CodeResponse{}
	}
	b, err := appendFrame(make([]byte, 0, headerLen+proto.Size(m)), op, id, m)
	if err != nil {
		log.Warn("mooncake master: encode an answer", "err", err)
		return
	}
	ok, err := p.TrySendAppend(len(b), func(dst []byte) []byte { return append(dst, b...) })
	if ok || err != nil {
		return
	}
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := send(sctx, e, p, b); err != nil {
			log.Debug("mooncake master: answer lost", "peer", p, "err", err)
		}
	}()
}

// send sends b to p from a buffer of e's registered pool (Peer.Send takes
// registered memory only).
func send(ctx context.Context, e *xfer.Engine, p *xfer.Peer, b []byte) error {
	buf, err := e.AllocWait(ctx, len(b))
	if err != nil {
		return err
	}
	defer e.Free(buf)
	copy(buf.Bytes(), b)
	return p.Send(ctx, buf.Bytes()[:len(b)])
}

// Client is a master's client on the data plane: masterpb.MasterClient
// over an engine connection to the master's engine. Safe for concurrent
// use.
type Client struct {
	e       *xfer.Engine
	p       *xfer.Peer
	fb      masterpb.MasterClient
	timeout time.Duration
	spin    time.Duration
	next    atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*call
	down    error
}

// call is a call waiting for its answer.
type call struct {
	op   byte
	resp proto.Message
	done chan error
}

// Options configures Dial.
type Options struct {
	// OpTimeout bounds each call whose context has no earlier deadline.
	// Default: 10 s.
	OpTimeout time.Duration
	// Spin is how long a caller polls for its answer before it blocks:
	// a caller on a thread of its own (a call through the C ABI) is
	// answered from the CPU instead of a thread's wake-up. Default: none.
	Spin time.Duration
	// Fallback takes the calls too large for a message (and those whose
	// answers are): the master's gRPC client. Required.
	Fallback masterpb.MasterClient
}

// Dial connects e to the master's engine at addr.
func Dial(ctx context.Context, e *xfer.Engine, addr string, o Options) (*Client, error) {
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.Fallback == nil {
		return nil, errors.New("mooncake master's data plane: Options.Fallback (the gRPC client) is required")
	}
	p, err := e.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("mooncake master's data plane at %s: %w", addr, err)
	}
	c := &Client{e: e, p: p, fb: o.Fallback, timeout: o.OpTimeout, spin: o.Spin, pending: map[uint64]*call{}}
	p.Handle(c.onAnswer)
	go func() {
		<-p.Down()
		c.fail(fmt.Errorf("mooncake master's data plane: %w", xfer.ErrPeerLost))
	}()
	return c, nil
}

// Close closes the connection; calls waiting fail.
func (c *Client) Close() error {
	c.fail(fmt.Errorf("mooncake master's data plane: %w", xfer.ErrClosed))
	return c.p.Close()
}

// Down is closed once the connection is gone.
func (c *Client) Down() <-chan struct{} { return c.p.Down() }

// fail ends every waiting call with err, and later ones too.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.down == nil {
		c.down = err
	}
	calls := c.pending
	c.pending = map[uint64]*call{}
	c.mu.Unlock()
	for _, cl := range calls {
		cl.done <- err
	}
}

// onAnswer decodes an answer into its call's response, on the receive path.
func (c *Client) onAnswer(msg []byte) {
	op, id, body, err := parseHeader(msg)
	if err != nil {
		return
	}
	c.mu.Lock()
	cl := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if cl == nil {
		return // a call that gave up
	}
	switch {
	case op == opTooLarge:
		cl.done <- errFallback
	case op == opUnknown:
		var r masterpb.CodeResponse
		proto.Unmarshal(body, &r)
		if r.Message != "" {
			// The master refused the call (a standby): this connection
			// leads nowhere now; the caller goes to gRPC, which finds the
			// leader.
			cl.done <- fmt.Errorf("%w: %s", ErrRefused, r.Message)
			go c.Close()
		} else {
			cl.done <- ErrUnknownCall
		}
	case op != cl.op|opAnswer:
		cl.done <- fmt.Errorf("mooncake master: answer op %#x to a call of op %d", op, cl.op)
	default:
		cl.done <- proto.Unmarshal(body, cl.resp)
	}
}

// invoke sends a call and waits for its answer in resp.
func (c *Client) invoke(ctx context.Context, op byte, req, resp proto.Message) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	id := c.next.Add(1)
	b, err := appendFrame(make([]byte, 0, headerLen+proto.Size(req)), op, id, req)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return errFallback
	}
	cl := &call{op: op, resp: resp, done: make(chan error, 1)}
	c.mu.Lock()
	if c.down != nil {
		err := c.down
		c.mu.Unlock()
		return err
	}
	c.pending[id] = cl
	c.mu.Unlock()
	ok, err := c.p.TrySendAppend(len(b), func(dst []byte) []byte { return append(dst, b...) })
	if err == nil && !ok {
		err = send(ctx, c.e, c.p, b)
	}
	if err != nil {
		c.forget(id)
		return err
	}
	if c.spin > 0 {
		start := time.Now()
		for i := 1; ; i++ {
			select {
			case err := <-cl.done:
				return err
			default:
			}
			if i%32 == 0 && time.Since(start) >= c.spin {
				break
			}
		}
	}
	select {
	case err := <-cl.done:
		return err
	case <-ctx.Done():
		c.forget(id)
		return fmt.Errorf("mooncake master: no answer: %w", ctx.Err())
	}
}

// forget drops a call that gave up.
func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

var _ masterpb.MasterClient = (*Client)(nil)

// do makes a call on the data plane, or on the fallback when it is too
// large for a message.
func do[Req, Resp proto.Message](c *Client, ctx context.Context, op byte, in Req, out Resp,
	fb func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	err := c.invoke(ctx, op, in, out)
	if errors.Is(err, errFallback) {
		return fb(ctx, in)
	}
	return out, err
}

func (c *Client) MountSegment(ctx context.Context, in *masterpb.MountSegmentRequest, _ ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return do(c, ctx, opMount, in, new(masterpb.CodeResponse), c.fb.MountSegment)
}

func (c *Client) UnmountSegment(ctx context.Context, in *masterpb.UnmountSegmentRequest, _ ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return do(c, ctx, opUnmount, in, new(masterpb.CodeResponse), c.fb.UnmountSegment)
}

func (c *Client) Ping(ctx context.Context, in *masterpb.PingRequest, _ ...grpc.CallOption) (*masterpb.PingResponse, error) {
	return do(c, ctx, opPing, in, new(masterpb.PingResponse), c.fb.Ping)
}

func (c *Client) PutStart(ctx context.Context, in *masterpb.PutStartRequest, _ ...grpc.CallOption) (*masterpb.PutStartResponse, error) {
	return do(c, ctx, opPutStart, in, new(masterpb.PutStartResponse), c.fb.PutStart)
}

func (c *Client) PutEnd(ctx context.Context, in *masterpb.PutEndRequest, _ ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return do(c, ctx, opPutEnd, in, new(masterpb.CodeResponse), c.fb.PutEnd)
}

func (c *Client) PutRevoke(ctx context.Context, in *masterpb.PutEndRequest, _ ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return do(c, ctx, opPutRevoke, in, new(masterpb.CodeResponse), c.fb.PutRevoke)
}

func (c *Client) GetReplicaList(ctx context.Context, in *masterpb.KeysRequest, _ ...grpc.CallOption) (*masterpb.GetReplicaListResponse, error) {
	return do(c, ctx, opGetReplicaList, in, new(masterpb.GetReplicaListResponse), c.fb.GetReplicaList)
}

func (c *Client) Exist(ctx context.Context, in *masterpb.KeysRequest, _ ...grpc.CallOption) (*masterpb.ExistResponse, error) {
	return do(c, ctx, opExist, in, new(masterpb.ExistResponse), c.fb.Exist)
}

func (c *Client) Remove(ctx context.Context, in *masterpb.RemoveRequest, _ ...grpc.CallOption) (*masterpb.RemoveResponse, error) {
	return do(c, ctx, opRemove, in, new(masterpb.RemoveResponse), c.fb.Remove)
}

func (c *Client) RemoveByRegex(ctx context.Context, in *masterpb.RemoveByRegexRequest, _ ...grpc.CallOption) (*masterpb.CountResponse, error) {
	return do(c, ctx, opRemoveByRegex, in, new(masterpb.CountResponse), c.fb.RemoveByRegex)
}

func (c *Client) RemoveAll(ctx context.Context, in *masterpb.RemoveAllRequest, _ ...grpc.CallOption) (*masterpb.CountResponse, error) {
	return do(c, ctx, opRemoveAll, in, new(masterpb.CountResponse), c.fb.RemoveAll)
}

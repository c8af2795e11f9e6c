package twin

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Name is the twin's transport name.
const Name = "twin"

// process identifies this process in handshake blobs.
var process = func() (id [16]byte) {
	_, _ = rand.Read(id[:])
	return id
}()

// Transport is the twin transport.
type Transport struct{}

var _ transport.Transport = (*Transport)(nil)

// New returns the twin transport.
func New() *Transport { return &Transport{} }

// Name is "twin".
func (*Transport) Name() string { return Name }

// Caps is what the twin can do: it connects the endpoints of one process,
// moves host memory only, and every access goes through the owner's Host,
// which checks it.
var Caps = transport.Caps{
	SameHost: true,
	Memory:   mem.KindSet(mem.KindHost),
	Rights:   transport.RightsByOwner,
}

// Caps returns the package's Caps.
func (*Transport) Caps() transport.Caps { return Caps }

// Devices is none: it opens no device.
func (*Transport) Devices() transport.Devices { return transport.Devices{} }

// Available is always nil.
func (*Transport) Available() error { return nil }

// LocalBlob names this process.
func (*Transport) LocalBlob() []byte { return append([]byte(nil), process[:]...) }

// Usable reports whether the peer is in this process.
func (*Transport) Usable(local, remote transport.PeerInfo) error {
	if !bytes.Equal(remote.Blob, process[:]) {
		return fmt.Errorf("twin: %w: the peer is not in this process (the twin transport connects endpoints of one process only)", transport.ErrNotSupported)
	}
	return nil
}

// tokenLen is the length of the token that pairs two Connect calls.
const tokenLen = 16

// waiting holds the dialers' endpoints until their acceptors link them.
var waiting = struct {
	sync.Mutex
	m map[[tokenLen]byte]*Endpoint
}{m: map[[tokenLen]byte]*Endpoint{}}

// Connect pairs this side with the peer's Connect in this process. It
// owns p.Conn from the start, also on error.
func (t *Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	if err := t.Usable(p.Local, p.Remote); err != nil {
		p.Conn.Close()
		return nil, err
	}
	if p.Host == nil || p.RecvDepth < 1 || p.MaxMessage < 1 {
		p.Conn.Close()
		return nil, fmt.Errorf("twin: connect needs a host, a receive depth and a max message (got %d, %d)", p.RecvDepth, p.MaxMessage)
	}
	e := &Endpoint{p: p, credits: p.RecvDepth, linked: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{})}
	var err error
	if p.Role == transport.Dialer {
		err = e.dial(ctx)
	} else {
		err = e.accept(ctx)
	}
	if err != nil {
		p.Conn.Close()
		return nil, fmt.Errorf("twin: %w", err)
	}
	e.wg.Add(1)
	go e.run()
	return e, nil
}

// dial registers the endpoint under a new token, sends the token to the
// acceptor, and waits until the acceptor's Connect links it.
func (e *Endpoint) dial(ctx context.Context) error {
	var token [tokenLen]byte
	if _, err := rand.Read(token[:]); err != nil {
		return err
	}
	waiting.Lock()
	waiting.m[token] = e
	waiting.Unlock()
	unregister := func() bool {
		waiting.Lock()
		defer waiting.Unlock()
		if waiting.m[token] == e {
			delete(waiting.m, token)
			return true
		}
		return false // linked meanwhile
	}
	if _, err := e.p.Conn.Write(token[:]); err != nil {
		if unregister() {
			return fmt.Errorf("send the pairing token: %w", err)
		}
	}
	select {
	case <-e.linked:
		return nil
	case <-ctx.Done():
		if unregister() {
			return fmt.Errorf("waiting for the acceptor: %w", ctx.Err())
		}
		<-e.linked
		return nil
	}
}

// accept reads the dialer's token and links the two endpoints.
func (e *Endpoint) accept(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { e.p.Conn.SetReadDeadline(time.Unix(1, 0)) })
	var token [tokenLen]byte
	_, err := io.ReadFull(e.p.Conn, token[:])
	stop()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("read the pairing token: %w", err)
	}
	waiting.Lock()
	d := waiting.m[token]
	delete(waiting.m, token)
	waiting.Unlock()
	if d == nil {
		return fmt.Errorf("%w: no dialer in this process sent that pairing token", transport.ErrProtocol)
	}
	e.peer, d.peer = d, e
	close(d.linked)
	return nil
}

// Endpoint is one side of a twin connection.
type Endpoint struct {
	p      transport.Params
	peer   *Endpoint // set once, by the acceptor's Connect
	linked chan struct{}

	mu       sync.Mutex
	queue    []*transport.Op // posted, not started
	sendWait []*transport.Op // sends waiting for a credit, in order
	credits  int             // messages the peer may still be sent
	err      error

	// serving is held (read) while the peer's operation runs against this
	// side's Host; fail takes it (write) once, so that no access is left
	// when Close returns.
	serving sync.RWMutex

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

var _ transport.Endpoint = (*Endpoint)(nil)

// Transport is "twin".
func (*Endpoint) Transport() string { return Name }

// Done is closed when the endpoint is down.
func (e *Endpoint) Done() <-chan struct{} { return e.done }

// Err reports why the endpoint is down, or nil.
func (e *Endpoint) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Post queues operations for the endpoint's goroutine. A SEND larger than
// Params.MaxMessage, and every operation posted once the endpoint is down,
// completes at once with an error.
func (e *Endpoint) Post(ops []*transport.Op, wait bool) {
	var now []*transport.Op
	e.mu.Lock()
	for _, op := range ops {
		switch {
		case e.err != nil:
			op.Err = e.err
		case op.Kind == transport.OpSend && len(op.Local) > e.p.MaxMessage:
			op.Err = fmt.Errorf("twin send of %d bytes: %w (max_message is %d)", len(op.Local), transport.ErrTooLarge, e.p.MaxMessage)
		case op.Kind < transport.OpWrite || op.Kind > transport.OpSend:
			op.Err = fmt.Errorf("twin: operation kind %d: %w", op.Kind, errors.ErrUnsupported)
		default:
			e.queue = append(e.queue, op)
			continue
		}
		now = append(now, op)
	}
	e.mu.Unlock()
	e.signal()
	for _, op := range now {
		op.Done.OpDone(op)
	}
}

func (e *Endpoint) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Cancel takes back an operation that has not started.
func (e *Endpoint) Cancel(op *transport.Op) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, q := range []*[]*transport.Op{&e.queue, &e.sendWait} {
		for i, o := range *q {
			if o == op {
				*q = append((*q)[:i], (*q)[i+1:]...)
				return true
			}
		}
	}
	return false
}

// Consumed returns n receive credits to the peer.
func (e *Endpoint) Consumed(n int) {
	if n <= 0 {
		return
	}
	d := e.peer
	d.mu.Lock()
	d.credits += n
	d.mu.Unlock()
	d.signal()
}

// Revoke has nothing to do: the peer caches nothing of this side's
// regions, and this side's Host refuses a deregistered one.
func (e *Endpoint) Revoke(id uint32) {}

// Close fails the operations not yet started, waits for the one running,
// and takes the peer down. It is idempotent.
func (e *Endpoint) Close() error {
	e.fail(&transport.LinkError{Peer: e.name(), Local: true})
	e.wg.Wait()
	e.p.Conn.Close()
	return nil
}

func (e *Endpoint) name() string {
	if e.p.Remote.Addr != "" {
		return e.p.Remote.Addr
	}
	return fmt.Sprintf("twin peer %x", e.p.Remote.ID[:6])
}

// errPeerClosed is why an endpoint whose peer closed went down.
var errPeerClosed = errors.New("the peer closed its twin endpoint")

// fail takes the endpoint down once: it fails what has not started, waits
// until no operation of the peer runs against this side's Host, and takes
// the peer down.
func (e *Endpoint) fail(err error) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = err
	ops := append(e.queue, e.sendWait...)
	e.queue, e.sendWait = nil, nil
	e.mu.Unlock()
	close(e.done)
	e.serving.Lock() // the peer's operation in progress here, if any, ends
	e.serving.Unlock()
	for _, op := range ops {
		op.Err = err
		op.Done.OpDone(op)
	}
	if e.peer != nil {
		e.peer.fail(&transport.LinkError{Peer: e.peer.name(), Cause: errPeerClosed})
	}
}

// next takes the next operation to run, or reports that the endpoint is
// down. SENDs keep their order and wait for credits; other operations do
// not wait behind them.
func (e *Endpoint) next() (*transport.Op, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if e.err != nil {
			return nil, false
		}
		if len(e.sendWait) > 0 && e.credits > 0 {
			op := e.sendWait[0]
			e.sendWait = e.sendWait[1:]
			e.credits--
			return op, true
		}
		if len(e.queue) > 0 {
			op := e.queue[0]
			e.queue[0] = nil
			e.queue = e.queue[1:]
			if op.Kind == transport.OpSend {
				if e.credits == 0 || len(e.sendWait) > 0 {
					e.sendWait = append(e.sendWait, op)
					continue
				}
				e.credits--
			}
			return op, true
		}
		e.mu.Unlock()
		select {
		case <-e.wake:
		case <-e.done:
		}
		e.mu.Lock()
	}
}

// run is the endpoint's goroutine: it runs the operations in order.
func (e *Endpoint) run() {
	defer e.wg.Done()
	for {
		op, ok := e.next()
		if !ok {
			return
		}
		op.Err = e.execute(op)
		op.Done.OpDone(op)
	}
}

// execute runs op against the peer's Host, as the peer would serve it.
func (e *Endpoint) execute(op *transport.Op) error {
	d := e.peer
	d.serving.RLock()
	defer d.serving.RUnlock()
	if err := d.Err(); err != nil {
		// The peer is going down and takes this side with it.
		return &transport.LinkError{Peer: e.name(), Cause: errPeerClosed}
	}
	h := d.p.Host
	r := op.Remote
	n := uint64(len(op.Local))
	switch op.Kind {
	case transport.OpWrite, transport.OpWriteImm:
		res, err := h.Resolve(r.Region, r.Key, r.Addr, n, transport.AccessWrite)
		if err != nil {
			return err
		}
		copy(res.Mem, op.Local)
		res.Release()
		if op.Kind == transport.OpWriteImm {
			h.Notify(d, transport.Notification{Value: op.Imm, Region: r.Region, Addr: r.Addr, Len: n})
		}
	case transport.OpRead:
		res, err := h.Resolve(r.Region, r.Key, r.Addr, n, transport.AccessRead)
		if err != nil {
			return err
		}
		copy(op.Local, res.Mem)
		res.Release()
	case transport.OpSend:
		h.Deliver(d, op.Local)
	}
	return nil
}

package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// endpoint completes what it is posted at once, with fail's error for the
// operations it names, or holds them (hold) until release.
type endpoint struct {
	name   string
	fail   func(*transport.Op) error
	hold   bool
	mu     sync.Mutex
	held   []*transport.Op
	posted int
}

func (e *endpoint) Post(ops []*transport.Op, _ bool) {
	for _, op := range ops {
		e.mu.Lock()
		e.posted++
		if e.hold {
			e.held = append(e.held, op)
			e.mu.Unlock()
			continue
		}
		e.mu.Unlock()
		if e.fail != nil {
			op.Err = e.fail(op)
		}
		op.Done.OpDone(op)
	}
}
func (e *endpoint) Cancel(*transport.Op) bool { return false }
func (e *endpoint) Consumed(int)              {}
func (e *endpoint) Revoke(uint32)             {}
func (e *endpoint) Done() <-chan struct{}     { return nil }
func (e *endpoint) Err() error                { return nil }
func (e *endpoint) Transport() string         { return e.name }
func (e *endpoint) Close() error              { return nil }

func (e *endpoint) release() {
	e.mu.Lock()
	held := e.held
	e.held, e.hold = nil, false
	e.mu.Unlock()
	for _, op := range held {
		op.Done.OpDone(op)
	}
}

// peer hands out its endpoints in turn, one per Endpoint call.
type peer struct {
	eps       []*endpoint
	dials     int
	failovers []string
	holds     int
	pinErr    error
}

func (p *peer) String() string { return "peer" }
func (p *peer) Endpoint(context.Context) (transport.Endpoint, *metrics.Conn, error) {
	if p.dials >= len(p.eps) {
		return nil, nil, errors.New("no more connections")
	}
	p.dials++
	return p.eps[p.dials-1], nil, nil
}
func (p *peer) Context() context.Context { return context.Background() }
func (p *peer) Pin([]byte) (*mem.Handle, error) {
	return nil, p.pinErr
}
func (p *peer) Staging(transport.Endpoint, *transport.Op) bool                    { return false }
func (p *peer) PostStaged(transport.Endpoint, *transport.Op)                      {}
func (p *peer) Stalled(_ transport.Endpoint, _ transport.OpKind, err error) error { return err }
func (p *peer) Repeatable(kind transport.OpKind, err error) bool {
	return errors.Is(err, transport.ErrPeerLost)
}
func (p *peer) OpDone(*metrics.Conn, metrics.Op, int, time.Time, error) {}
func (p *peer) FailedOver(from, to string, _ transport.OpKind, attempts int) {
	p.failovers = append(p.failovers, fmt.Sprintf("%s>%s#%d", from, to, attempts))
}
func (p *peer) Hold([]byte) (func(), bool) { p.holds++; return func() {}, true }
func (p *peer) Logger() *slog.Logger       { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func submit(b *Batch, p Peer, repeat bool, kinds ...transport.OpKind) []error {
	errs := make([]error, len(kinds))
	b.SetErr = func(i int, err error) { errs[i] = err }
	ops := b.Reset(len(kinds))
	for i, k := range kinds {
		ops[i] = transport.Op{Kind: k, Local: make([]byte, 8)}
	}
	b.Post(p, repeat, false)
	return errs
}

func TestBatchFailover(t *testing.T) {
	lost := func(op *transport.Op) error {
		if op.Tag == 1 {
			return fmt.Errorf("connection: %w", transport.ErrPeerLost)
		}
		return nil
	}
	p := &peer{eps: []*endpoint{{name: "a", fail: lost}, {name: "b"}}}
	var b Batch
	errs := submit(&b, p, true, transport.OpWrite, transport.OpRead)
	if err := b.Wait(context.Background()); err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("Wait: %v, errs %v", err, errs)
	}
	if fmt.Sprint(p.failovers) != "[a>b#1]" || p.eps[1].posted != 1 {
		t.Fatalf("failovers %v, posted again %d: want the lost READ alone on b", p.failovers, p.eps[1].posted)
	}
	// Not repeatable: the loss is the operation's error.
	p = &peer{eps: []*endpoint{{name: "a", fail: lost}, {name: "b"}}}
	errs = submit(&b, p, false, transport.OpWrite, transport.OpSend)
	if err := b.Wait(context.Background()); !errors.Is(err, transport.ErrPeerLost) || errs[0] != nil || !errors.Is(errs[1], transport.ErrPeerLost) {
		t.Fatalf("Wait: %v, errs %v", err, errs)
	}
	if p.dials != 1 {
		t.Fatalf("dialed %d times", p.dials)
	}
}

func TestBatchErrors(t *testing.T) {
	var b Batch
	p := &peer{}
	errs := submit(&b, p, false, transport.OpWrite)
	if err := b.Wait(context.Background()); err == nil || errs[0] != err || !b.Done() {
		t.Fatalf("no connection: %v, errs %v", err, errs)
	}
	p = &peer{eps: []*endpoint{{name: "a"}}, pinErr: transport.ErrNotRegistered}
	submit(&b, p, false, transport.OpWrite, transport.OpRead)
	if err := b.Wait(context.Background()); !errors.Is(err, transport.ErrNotRegistered) {
		t.Fatalf("unregistered memory: %v", err)
	}
	submit(&b, p, false)
	if err := b.Wait(context.Background()); err != nil || !b.Done() {
		t.Fatalf("an empty batch: %v", err)
	}
}

func TestBatchAbandoned(t *testing.T) {
	ep := &endpoint{name: "a", hold: true}
	p := &peer{eps: []*endpoint{ep}}
	var b Batch
	submit(&b, p, false, transport.OpWrite, transport.OpWrite)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Wait(ctx); !errors.Is(err, context.Canceled) || b.Done() || p.holds != 2 {
		t.Fatalf("Wait: %v, done %v, holds %d", err, b.Done(), p.holds)
	}
	ep.release()
	if err := b.Wait(context.Background()); err != nil || !b.Done() {
		t.Fatalf("after the transport let go: %v", err)
	}
}

func TestCall(t *testing.T) {
	c := GetCall()
	c.OpDone(&c.Op) // done before the caller looks
	if c.Wait() != nil {
		t.Fatal("a call done during its post waits")
	}
	c.Put()
	c = GetCall()
	wait := c.Wait()
	go c.OpDone(&c.Op)
	<-wait
	c.Put()
	// Abandoned, the call keeps its region pinned and its bytes held until
	// the transport is done with them.
	mr, err := mem.NewRegion(mem.RegionOptions{Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	h := mem.NewHandle(mr, 1, 1, mem.AccessReadWrite)
	h.Pin()
	c = GetCall()
	c.Wait()
	released := false
	if !c.Abandon(h, func() { released = true }) {
		t.Fatal("a running call could not be abandoned")
	}
	if released || h.Pins() != 1 {
		t.Fatalf("abandoned: released %v, pins %d", released, h.Pins())
	}
	c.OpDone(&c.Op)
	if !released || h.Pins() != 0 {
		t.Fatalf("done: released %v, pins %d", released, h.Pins())
	}
}

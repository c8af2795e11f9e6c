package directory

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// registrar is what both directory clients (etcd's, the coordinator's)
// keep of the registrations this process made: the context their
// goroutines run under, which ends at Close, and each registration by node
// ID. R is the client's record of one registration (*lease, *beat).
type registrar[R interface{ base() *reg }] struct {
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	regMu  sync.Mutex // serialises Register and Deregister
	mu     sync.Mutex
	closed bool
	regs   map[string]R // this client's registrations, by node ID
}

// reg is what a client keeps of every registration: its entry, the
// goroutine that keeps it alive, and its state.
type reg struct {
	raw  []byte // the latest entry; guarded by registrar.mu
	stop context.CancelFunc
	done chan struct{} // closed when the goroutine returns
	st   *regState
}

func (r *reg) base() *reg { return r }

// halt stops the registration's goroutine and waits for it to return.
func (r *reg) halt() {
	r.stop()
	<-r.done
}

// open readies the registrar of a new client.
func (r *registrar[R]) open() {
	r.regs = map[string]R{}
	r.ctx, r.cancel = context.WithCancel(context.Background())
}

// encode encodes e for Register, unless the client is closed.
func (r *registrar[R]) encode(e Entry) ([]byte, error) {
	raw, err := e.Marshal()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	return raw, nil
}

// watch runs run, which sends a Watch's events on ch, unless the client
// is closed; ch is closed when run returns, and Close waits for it.
func (r *registrar[R]) watch(run func(ch chan<- Event)) (<-chan Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	ch := make(chan Event, 64)
	r.wg.Go(func() {
		defer close(ch)
		run(ch)
	})
	return ch, nil
}

// take removes node id's registration, if any, and returns it.
func (r *registrar[R]) take(id string) (R, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x, ok := r.regs[id]
	delete(r.regs, id)
	return x, ok
}

// Registrations returns the state of each of this client's registrations,
// by node ID.
func (r *registrar[R]) Registrations() []Registration {
	r.mu.Lock()
	out := make([]Registration, 0, len(r.regs))
	for _, x := range r.regs {
		out = append(out, x.base().st.get())
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Registration) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// shut marks the client closed, ends its context and returns its
// registrations for Close to remove; false when it was closed already.
// The caller waits for wg before removing them.
func (r *registrar[R]) shut() (map[string]R, bool) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false
	}
	r.closed = true
	regs := r.regs
	r.regs = map[string]R{}
	r.mu.Unlock()
	r.cancel()
	return regs, true
}

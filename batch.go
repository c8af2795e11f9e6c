package xfer

import (
	"context"
	"log/slog"
	"time"

	"github.com/xferio/xfer/internal/batch"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Batches: operations submitted together and waited for together.
// internal/batch tracks their completion and repeats them on a new
// connection; the peer it needs is the Peer, as batchPeer.

// Op is one operation of a batch. Local must lie in registered memory and
// must not be touched until the batch is done. Err is set when it completes.
type Op struct {
	Kind   OpKind
	Local  []byte
	Remote RemoteAddr // unused by OpSend
	Value  uint32     // the notification value of OpWriteNotify
	Err    error
}

// Submit posts a batch of operations and returns at once. The batch owns
// ops until it is done: Batch.Wait, then read each ops[i].Err.
//
// A batch of only READs and WRITEs to a peer this engine dialed is safe to
// repeat, as Peer.Write and Peer.Read are: when its connection is lost
// (not stalled), the operations that did not complete are posted again,
// in their order, on a new connection, up to three times, each counted as
// a failover (Status, the failover metric); those that completed are not.
// A batch with a write-with-notify or a SEND is not repeated: its lost
// operations fail with ErrPeerLost, as the peer may have had them.
//
// A batch of one operation is taken for a call that is waited for at once:
// over rdma, Submit then polls for its completion for up to a millisecond
// before it returns. SubmitInto never does.
func (p *Peer) Submit(ops []Op) *Batch {
	b := new(Batch)
	p.submit(b, ops, len(ops) == 1)
	return b
}

// SubmitInto is Submit into a Batch the caller keeps and reuses: b is a
// zero Batch, or one whose operations are all done (Done reports true, or
// Wait has returned). A Batch that has held n operations posts n or fewer
// again without allocating, so that a caller that keeps some batches in
// flight (a pipeline) allocates nothing per submission. b must not be
// waited on by anyone while SubmitInto runs. SubmitInto returns as soon
// as the operations are posted, on every transport.
func (p *Peer) SubmitInto(b *Batch, ops []Op) { p.submit(b, ops, false) }

// submit posts ops as batch b; waited marks them as waited for at once.
func (p *Peer) submit(b *Batch, ops []Op, waited bool) {
	if b.b.SetErr == nil {
		b.b.SetErr = func(i int, err error) { b.ops[i].Err = err }
	}
	tops := b.b.Reset(len(ops))
	b.ops = ops
	repeat := p.dialAddr != ""
	for i := range ops {
		if k := ops[i].Kind; k != OpRead && k != OpWrite {
			repeat = false
		}
		tops[i] = transport.Op{Kind: ops[i].Kind, Local: ops[i].Local, Remote: ops[i].Remote, Imm: ops[i].Value}
	}
	b.b.Post((*batchPeer)(p), repeat, waited)
}

// Batch is a submitted group of operations.
type Batch struct {
	ops []Op
	b   batch.Batch
}

// OpDone implements transport.Completer.
func (b *Batch) OpDone(t *transport.Op) { b.b.OpDone(t) }

// Done reports, without waiting, whether every operation has completed.
func (b *Batch) Done() bool { return b.b.Done() }

// Wait waits for every operation and returns the first error (each
// operation's own is in its Err). When ctx ends first, operations not yet
// complete are cancelled where the transport can, and Wait returns at
// once: with the batch's first error when every operation has ended, or
// else with ctx's error, abandoning the operations the transport could
// not take back, as Peer.Write does. They go on without the caller until
// they complete or their connection fails (Config.OpTimeout bounds that);
// until then the batch keeps their memory registered and their bytes in
// the engine's pool from being handed out again, the operations (ops[i],
// their Err included) still belong to the batch (Done reports false), and
// a SubmitInto of it waits for them.
func (b *Batch) Wait(ctx context.Context) error { return b.b.Wait(ctx) }

// batchPeer is a Peer as its batches see it (batch.Peer), without those
// methods on Peer itself.
type batchPeer Peer

func (bp *batchPeer) String() string { return (*Peer)(bp).String() }

func (bp *batchPeer) Endpoint(ctx context.Context) (transport.Endpoint, *metrics.Conn, error) {
	box, err := (*Peer)(bp).endpoint(ctx)
	if err != nil {
		return nil, nil, err
	}
	return box.ep, box.conn, nil
}

func (bp *batchPeer) Context() context.Context { return bp.e.ctx }

func (bp *batchPeer) Pin(local []byte) (*mem.Handle, error) {
	h, err := bp.e.pinLocal(local)
	if err != nil {
		return nil, bp.e.closedOr(err)
	}
	return h, nil
}

func (bp *batchPeer) Staging(ep transport.Endpoint, op *transport.Op) bool {
	return bp.e.staging(ep, op)
}

func (bp *batchPeer) PostStaged(ep transport.Endpoint, op *transport.Op) { bp.e.postStaged(ep, op) }

func (bp *batchPeer) Stalled(ep transport.Endpoint, kind OpKind, err error) error {
	return (*Peer)(bp).stalled(ep, kind, err)
}

func (bp *batchPeer) Repeatable(kind OpKind, err error) bool {
	return (*Peer)(bp).repeatable(context.Background(), kind, err)
}

func (bp *batchPeer) OpDone(c *metrics.Conn, op metrics.Op, n int, start time.Time, err error) {
	(*Peer)(bp).opDone(c, op, n, start, err)
}

func (bp *batchPeer) FailedOver(from, to string, kind OpKind, attempts int) {
	(*Peer)(bp).failedOver(from, to, kind, attempts)
}

func (bp *batchPeer) Hold(b []byte) (func(), bool) { return bp.e.pool.Hold(b) }

func (bp *batchPeer) Logger() *slog.Logger { return bp.e.log }

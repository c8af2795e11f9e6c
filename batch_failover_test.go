package xfer_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// lostUnder submits ops to p while the relay r holds every byte (frozen),
// and once they are posted, closes the relay's connections under them, as
// a broken link does, and returns the batch's error. Every operation is
// under way when its connection is lost, and none has completed, whatever
// the timing.
func lostUnder(t *testing.T, p *xfer.Peer, r *relay, ops []xfer.Op) error {
	t.Helper()
	b := postFrozen(t, p, r, ops)
	r.unfreeze()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.Wait(ctx)
}

// postFrozen freezes r, with every pipe idle, submits ops to p, and once
// they are posted (Submit returned, or the relay holds some of their
// bytes: over tcp, Submit may wait for room in a socket that the frozen
// relay does not drain), cuts r's connections. The relay stays frozen.
func postFrozen(t *testing.T, p *xfer.Peer, r *relay, ops []xfer.Op) *xfer.Batch {
	t.Helper()
	r.idle(t)
	r.freeze()
	before := r.read.Load()
	bc := make(chan *xfer.Batch, 1)
	go func() { bc <- p.Submit(ops) }()
	var b *xfer.Batch
	for i := 0; b == nil && r.read.Load() == before; i++ {
		if i == 10000 {
			t.Fatal("the batch is not posted after 10 s")
		}
		select {
		case b = <-bc:
		case <-time.After(time.Millisecond):
		}
	}
	r.cut()
	if b == nil {
		b = <-bc
	}
	return b
}

// A batch of READs and WRITEs whose connection is lost under it is posted
// again on a new connection, and its caller never sees the break; the
// status counts a failover per batch. A batch with a write-with-notify is
// not repeated: it fails with ErrPeerLost.
func TestBatchFailover(t *testing.T) {
	cli, p, desc, r := stallPair(t, time.Minute, 0)
	buf := patterned(t, cli, 16<<20)
	const piece = 2 << 20
	var writes []xfer.Op
	for i := range 4 {
		writes = append(writes, xfer.Op{Kind: xfer.OpWrite, Local: buf.Bytes()[i*piece : (i+1)*piece], Remote: desc.At(uint64(i * piece))})
	}
	if err := lostUnder(t, p, r, writes); err != nil {
		t.Fatalf("a batch of WRITEs across a lost connection: %v", err)
	}
	reads := []xfer.Op{{Kind: xfer.OpRead, Local: buf.Bytes()[8<<20:], Remote: desc.At(0)}}
	if err := lostUnder(t, p, r, reads); err != nil {
		t.Fatalf("a batch of a READ across a lost connection: %v", err)
	}
	if !bytes.Equal(buf.Bytes()[:8<<20], buf.Bytes()[8<<20:]) {
		t.Fatal("the READ repeated after the break returned other bytes than the WRITEs repeated after the break wrote")
	}
	st := cli.Status()
	if st.Failovers != 2 || len(st.RecentFailovers) != 2 || st.RecentFailovers[0].From != "tcp" || st.RecentFailovers[0].Op != "write" || st.RecentFailovers[1].Op != "read" {
		t.Errorf("status: %d failovers, %+v; want the WRITEs' batch and the READ's", st.Failovers, st.RecentFailovers)
	}
	// With a write-with-notify, it is not repeated.
	mixed := []xfer.Op{
		{Kind: xfer.OpWrite, Local: buf.Bytes()[:piece], Remote: desc.At(0)},
		{Kind: xfer.OpWriteNotify, Local: buf.Bytes()[piece : 2*piece], Remote: desc.At(piece), Value: 7},
	}
	err := lostUnder(t, p, r, mixed)
	if !errors.Is(err, xfer.ErrPeerLost) || strings.Contains(err.Error(), "posted again") {
		t.Fatalf("a batch with a write-with-notify across a lost connection: %v, want ErrPeerLost", err)
	}
	for i, op := range mixed {
		if !errors.Is(op.Err, xfer.ErrPeerLost) {
			t.Errorf("op %d (%s): %v, want ErrPeerLost", i, op.Kind, op.Err)
		}
	}
	if st := cli.Status(); st.Failovers != 2 {
		t.Errorf("status: %d failovers after the unrepeatable batch, want 2", st.Failovers)
	}
	// The peer works on.
	if err := p.Write(context.Background(), buf.Bytes()[:piece], desc.At(0)); err != nil {
		t.Fatal(err)
	}
}

// Of a batch whose connection is lost, only the operations lost are posted
// again: one that had failed for another reason (a buffer outside
// registered memory) keeps its error.
func TestBatchFailoverOnlyLost(t *testing.T) {
	cli, p, desc, r := stallPair(t, time.Minute, 0)
	buf, err := cli.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ops := []xfer.Op{
		{Kind: xfer.OpWrite, Local: buf.Bytes(), Remote: desc.At(0)},
		{Kind: xfer.OpWrite, Local: make([]byte, 64), Remote: desc.At(8 << 20)},
	}
	err = lostUnder(t, p, r, ops)
	if ops[0].Err != nil || !errors.Is(ops[1].Err, xfer.ErrNotRegistered) || !errors.Is(err, xfer.ErrNotRegistered) {
		t.Fatalf("batch: %v; ops: %v, %v; want the lost WRITE repeated and the other's error kept", err, ops[0].Err, ops[1].Err)
	}
	if st := cli.Status(); st.Failovers != 1 {
		t.Errorf("status: %d failovers, want 1", st.Failovers)
	}
}

// A Wait whose context ends while the batch waits for a new connection
// ends the lost operations with its context's error: none is posted
// again, and the batch is done and can be submitted again.
func TestBatchFailoverWaitEnds(t *testing.T) {
	cli, p, desc, r := stallPair(t, time.Minute, 0)
	buf, err := cli.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ops := []xfer.Op{{Kind: xfer.OpWrite, Local: buf.Bytes(), Remote: desc.At(0)}}
	b := postFrozen(t, p, r, ops) // the relay stays frozen: no new connection can be made
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = b.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(ops[0].Err, context.DeadlineExceeded) || !b.Done() {
		t.Fatalf("wait: %v, op: %v, done: %v; want the context's deadline, and the batch done", err, ops[0].Err, b.Done())
	}
	r.unfreeze()
	p.SubmitInto(b, ops)
	if err := b.Wait(context.Background()); err != nil {
		t.Fatalf("the batch submitted again: %v", err)
	}
}

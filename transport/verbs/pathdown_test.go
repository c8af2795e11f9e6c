package verbs_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/verbs"
)

// An endpoint built with Params.OnFailover whose queue pairs fail (here:
// all of the dialer's moved to the error state, as a failing NIC leaves
// them) while its control stream lives carries on over that stream: both
// sides move (the dialer finds the failure, the acceptor is told), each
// says so once, and Transport is "tcp" on both. Four workers keep 64 KiB
// WRITEs and READs in flight throughout, a fifth batches of four READs
// posted at once, and they check every byte: none fails, those in flight
// when the queue pairs broke are repeated on the stream.
// A sender keeps numbered messages in flight: every message that
// succeeded arrives, in order, none twice; one in flight at the break may
// fail with ErrPathFailed. After the move, messages beyond the receive
// depth still flow (credits come back over the stream), and a
// write-with-notify's notification finds its data in place.
func TestPathFailover(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	const depth = 8
	var moved sync.Map // role -> cause
	var calls atomic.Int32
	p, err := transporttest.Connect(t, verbs.New(verbs.Config{Device: dev}, nil), verbs.New(verbs.Config{Device: dev}, nil), transporttest.PairConfig{
		RecvDepth: depth, MaxMessage: 4096,
		OnFailover: func(role transport.Role, from, to string, cause error) {
			calls.Add(1)
			if from != "rdma" || to != "tcp" {
				t.Errorf("failover from %q to %q, want rdma to tcp", from, to)
			}
			if _, dup := moved.LoadOrStore(role, cause); dup {
				t.Errorf("side %v moved twice", role)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, a := p.Dialer, p.Acceptor
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const chunk = 64 << 10
	local := d.Host.NewRegion(5*chunk, transport.AccessRead|transport.AccessWrite)
	remote := a.Host.NewRegion(5*chunk, transport.AccessRead|transport.AccessWrite)
	pattern := func(i, round int, b []byte) {
		for j := range b {
			b[j] = byte(j*(i+3) + i + round)
		}
	}
	do := func(op *transport.Op) error {
		done := make(completions, 1)
		op.Done = done
		d.Endpoint.Post([]*transport.Op{op}, false)
		select {
		case <-done:
			return op.Err
		case <-ctx.Done():
			return fmt.Errorf("%s still in flight: %w", op.Kind, ctx.Err())
		}
	}

	var ops atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for i := range 4 {
		buf := local.Bytes()[i*chunk : (i+1)*chunk]
		if i%2 == 1 {
			pattern(i, 0, remote.Bytes()[i*chunk:(i+1)*chunk])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := make([]byte, chunk)
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if i%2 == 0 {
					pattern(i, round, buf)
					err = do(d.Host.Op(transport.OpWrite, buf, remote.At(uint64(i*chunk)), 0, nil))
					if err == nil && !bytes.Equal(remote.Bytes()[i*chunk:(i+1)*chunk], buf) {
						err = fmt.Errorf("worker %d round %d: the target holds other bytes than were written", i, round)
					}
				} else {
					clear(buf)
					err = do(d.Host.Op(transport.OpRead, buf, remote.At(uint64(i*chunk)), 0, nil))
					pattern(i, 0, want)
					if err == nil && !bytes.Equal(buf, want) {
						err = fmt.Errorf("worker %d round %d: a READ returned other bytes than the target holds", i, round)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", i, err)
					return
				}
				ops.Add(1)
			}
		}()
	}

	// A fifth worker posts batches: four READs of a quarter each, of the
	// slot worker 1 reads, in one Post.
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := local.Bytes()[4*chunk : 5*chunk]
		want := make([]byte, chunk)
		pattern(1, 0, want)
		const q = chunk / 4
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			clear(buf)
			done := make(completions, 4)
			batch := make([]*transport.Op, 4)
			for k := range batch {
				batch[k] = d.Host.Op(transport.OpRead, buf[k*q:(k+1)*q], remote.At(uint64(chunk+k*q)), 0, done)
			}
			d.Endpoint.Post(batch, false)
			for range batch {
				select {
				case op := <-done:
					if op.Err != nil {
						errs <- fmt.Errorf("batch round %d: %w", round, op.Err)
						return
					}
				case <-ctx.Done():
					errs <- fmt.Errorf("batch round %d still in flight: %w", round, ctx.Err())
					return
				}
			}
			if !bytes.Equal(buf, want) {
				errs <- fmt.Errorf("batch round %d: the READs returned other bytes than the target holds", round)
				return
			}
			ops.Add(1)
		}
	}()

	// Numbered messages, dialer to acceptor, and a receiver that hands
	// the credits back.
	msgBuf := d.Host.NewRegion(4096, transport.AccessRead)
	var sent, failed atomic.Int64
	var sendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := uint64(1); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			b := msgBuf.Bytes()[:8]
			binary.LittleEndian.PutUint64(b, n)
			err := do(d.Host.Op(transport.OpSend, b, transport.RemoteAddr{}, 0, nil))
			switch {
			case err == nil:
				sent.Store(int64(n))
			case errors.Is(err, transport.ErrPathFailed) && failed.Load() < 2:
				failed.Add(1)
				t.Logf("message %d was in flight when the queue pairs failed: %v", n, err)
			default:
				sendErr = fmt.Errorf("message %d: %w", n, err)
				return
			}
		}
	}()
	var lastGot, received, gaps atomic.Uint64
	recvDone := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() {
		for {
			m, err := a.Host.Recv(rctx)
			if err != nil {
				recvDone <- nil
				return
			}
			a.Endpoint.Consumed(1)
			if len(m) != 8 {
				recvDone <- fmt.Errorf("a message of %d bytes, want 8", len(m))
				return
			}
			n, prev := binary.LittleEndian.Uint64(m), lastGot.Load()
			if n <= prev {
				recvDone <- fmt.Errorf("message %d arrived after message %d", n, prev)
				return
			}
			gaps.Add(n - prev - 1)
			received.Add(1)
			lastGot.Store(n)
		}
	}()

	for ops.Load() < 40 || sent.Load() < 3*depth {
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("no traffic before the break: %d ops, %d messages", ops.Load(), sent.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	before := ops.Load()
	verbs.BreakQPs(d.Transport.(*verbs.Transport))
	t.Logf("broke the dialer's queue pairs after %d operations and %d messages", before, sent.Load())

	// Both sides move to the stream.
	for d.Endpoint.Transport() != "tcp" || a.Endpoint.Transport() != "tcp" || calls.Load() < 2 {
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("after the break: the dialer is on %q, the acceptor on %q, %d sides said they moved", d.Endpoint.Transport(), a.Endpoint.Transport(), calls.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, s := range []*transporttest.Side{d, a} {
		select {
		case <-s.Endpoint.Done():
			t.Fatalf("an endpoint went down instead of moving: %v", s.Endpoint.Err())
		default:
		}
	}
	// Traffic goes on: more operations, and more messages than the
	// receive depth, after the move.
	after := ops.Load()
	sentAt := sent.Load()
	for ops.Load() < after+40 || sent.Load() < sentAt+3*depth {
		select {
		case err := <-errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("traffic stopped after the move: %d operations (%d at the move), messages sent %d (%d at the move); send error %v", ops.Load(), after, sent.Load(), sentAt, sendErr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if sendErr != nil {
		t.Fatal(sendErr)
	}

	// A write-with-notify: the notification finds its data in place.
	note := d.Host.NewRegion(4096, transport.AccessRead)
	pattern(9, 9, note.Bytes())
	a.Host.OnNotify(func(n transport.Notification) {
		if !bytes.Equal(remote.Bytes()[4*chunk:4*chunk+4096], note.Bytes()) {
			t.Errorf("the notification %d came before its data", n.Value)
		}
	})
	if err := do(d.Host.Op(transport.OpWriteImm, note.Bytes(), remote.At(4*chunk), 77, nil)); err != nil {
		t.Fatalf("write-with-notify after the move: %v", err)
	}
	if n, err := a.Host.WaitNotify(ctx); err != nil || n.Value != 77 {
		t.Fatalf("notification after the move: %+v, %v", n, err)
	}

	// Every message that succeeded arrived, in order.
	last := uint64(sent.Load())
	for lastGot.Load() < last {
		select {
		case err := <-recvDone:
			t.Fatalf("receiving: %v (got %d messages, last sent %d)", err, received.Load(), last)
		case <-ctx.Done():
			t.Fatalf("message %d never arrived (got %d messages)", last, received.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	rcancel()
	if err := <-recvDone; err != nil {
		t.Fatal(err)
	}
	// A message missing is one that failed in flight, never one that
	// succeeded.
	if g := gaps.Load(); g > uint64(failed.Load()) {
		t.Errorf("%d messages are missing, and only %d failed", g, failed.Load())
	}
	t.Logf("%d operations, %d after the move; %d messages arrived, %d failed in flight; moves: dialer %v, acceptor %v",
		ops.Load(), ops.Load()-after, received.Load(), failed.Load(), load(&moved, transport.Dialer), load(&moved, transport.Acceptor))
}

func load(m *sync.Map, k any) any {
	v, _ := m.Load(k)
	return v
}

package verbs_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/verbs"
)

// A READ posted after its device went, but before the device's removal
// reached the endpoint, finds the device's registrations gone. The
// endpoint's queue pairs go down before the READ completes: without
// OnFailover the endpoint has failed by the time the READ's error is seen
// (a rail's operations are repeated on another rail on that sign alone,
// and an engine that saw the error first took the connection for lost);
// with OnFailover the endpoint moves to its control stream, and the READ
// is carried there and succeeds.
func TestPostOnGoneDevice(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	for _, failover := range []bool{false, true} {
		name := "fail"
		if failover {
			name = "failover"
		}
		t.Run(name, func(t *testing.T) {
			dt := verbs.New(verbs.Config{Device: dev}, nil)
			cfg := transporttest.PairConfig{}
			if failover {
				cfg.OnFailover = func(transport.Role, string, string, error) {}
			}
			p, err := transporttest.Connect(t, dt, verbs.New(verbs.Config{Device: dev}, nil), cfg)
			if err != nil {
				t.Fatal(err)
			}
			d, a := p.Dialer, p.Acceptor
			local := d.Host.NewRegion(4096, transport.AccessRead|transport.AccessWrite)
			remote := a.Host.NewRegion(4096, transport.AccessRead|transport.AccessWrite)
			copy(remote.Bytes(), "the target's bytes")
			// One READ first: the remote region is attached, so that the
			// next one reaches the local registration.
			post := func() (*transport.Op, error) {
				op := d.Host.Op(transport.OpRead, local.Bytes(), remote.At(0), 0, nil)
				done := make(chan error, 1)
				op.Done = doneFunc(func(op *transport.Op) { done <- d.Endpoint.Err() })
				d.Endpoint.Post([]*transport.Op{op}, false)
				select {
				case epErr := <-done:
					return op, epErr
				case <-time.After(time.Minute):
					t.Fatal("the READ is still in flight a minute later")
					return nil, nil
				}
			}
			if op, _ := post(); op.Err != nil {
				t.Fatalf("the READ before the device went: %v", op.Err)
			}
			verbs.MarkGone(dt, errors.New("the test took the device away"))
			clear(local.Bytes())
			op, epErr := post()
			if failover {
				if op.Err != nil {
					t.Fatalf("the READ failed with %v; it was to be carried over the control stream", op.Err)
				}
				if string(local.Bytes()[:18]) != "the target's bytes" {
					t.Fatalf("the READ carried over the stream read %q", local.Bytes()[:18])
				}
				if got := d.Endpoint.Transport(); got != "tcp" {
					t.Fatalf("the endpoint's transport is %q after the move, want tcp", got)
				}
				return
			}
			if !errors.Is(op.Err, net.ErrClosed) {
				t.Fatalf("the READ failed with %v, want a lost connection", op.Err)
			}
			if epErr == nil {
				t.Fatal("the endpoint had not failed when the READ's error was handed on")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			select {
			case <-d.Endpoint.Done():
			case <-ctx.Done():
				t.Fatal("the endpoint is not done 10 s after it failed")
			}
		})
	}
}

type doneFunc func(*transport.Op)

func (f doneFunc) OpDone(op *transport.Op) { f(op) }

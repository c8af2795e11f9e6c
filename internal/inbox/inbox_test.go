package inbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/xferio/xfer/transport"
)

// endpoint counts the messages consumed; the rest of the contract is not
// called.
type endpoint struct {
	transport.Endpoint
	consumed int
}

func (e *endpoint) Consumed(n int) { e.consumed += n }

func TestTake(t *testing.T) {
	q := New()
	ep := &endpoint{}
	lent := []byte("hello")
	q.Deliver(ep, lent)
	lent[0] = 'j' // the transport reuses what it lent
	q.Deliver(ep, []byte("world!"))
	select {
	case <-q.Signal():
	default:
		t.Fatal("no signal after a delivery")
	}
	buf := make([]byte, 5)
	if n, ok, err := q.Take(buf); !ok || err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Take: %q, %v, %v", buf[:n], ok, err)
	}
	if _, ok, err := q.Take(buf); ok || !errors.Is(err, transport.ErrTooLarge) || q.Len() != 1 {
		t.Fatalf("a message too large: %v, %v, %d waiting", ok, err, q.Len())
	}
	buf = make([]byte, 6)
	if n, ok, _ := q.Take(buf); !ok || string(buf[:n]) != "world!" {
		t.Fatalf("the kept message: %q", buf[:n])
	}
	if _, ok, err := q.Take(buf); ok || err != nil || ep.consumed != 2 {
		t.Fatalf("empty: %v, %v; consumed %d", ok, err, ep.consumed)
	}
}

func TestHandle(t *testing.T) {
	q := New()
	ep := &endpoint{}
	q.Deliver(ep, []byte("a"))
	q.Deliver(ep, []byte("bb"))
	q.Take(make([]byte, 1)) // takes a
	q.Deliver(ep, []byte("c"))
	q.Take(make([]byte, 1)) // keeps bb
	var got []string
	q.Handle(func(m []byte) { got = append(got, string(m)) })
	q.Deliver(ep, []byte("d"))
	if want := "[bb c d]"; fmt.Sprint(got) != want || q.Len() != 0 || ep.consumed != 4 || q.Handler() == nil {
		t.Fatalf("handled %v, want %s; %d waiting, %d consumed", got, want, q.Len(), ep.consumed)
	}
}

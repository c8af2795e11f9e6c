package tcp

import (
	"context"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stream"
)

// Transport is the tcp transport. It works wherever TCP does.
type Transport struct{}

var _ transport.Transport = (*Transport)(nil)

// New returns the tcp transport.
func New() *Transport { return &Transport{} }

// Name is "tcp".
func (*Transport) Name() string { return "tcp" }

// Available is always nil.
func (*Transport) Available() error { return nil }

// LocalBlob is empty: tcp needs nothing beyond the handshake.
func (*Transport) LocalBlob() []byte { return nil }

// Usable is always nil.
func (*Transport) Usable(local, remote transport.PeerInfo) error { return nil }

// Connect builds an endpoint over the handshaken connection (and
// p.Conns-1 more).
func (*Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	s, err := stream.New(ctx, p, stream.Options{Name: "tcp"})
	if err != nil {
		return nil, err
	}
	return &Endpoint{s: s}, nil
}

// Endpoint is a tcp endpoint: all of its operations are frames on its
// stream.
type Endpoint struct {
	s *stream.Stream
}

var (
	_ transport.Endpoint = (*Endpoint)(nil)
	_ transport.Appender = (*Endpoint)(nil)
	_ transport.Counter  = (*Endpoint)(nil)
)

// Post sends the operations as frames.
func (e *Endpoint) Post(ops []*transport.Op) { e.s.Post(ops) }

// Counts returns the stream's counts (transport.Counter).
func (e *Endpoint) Counts() transport.Counts { return e.s.Counts() }

// Cancel abandons op if the target has not answered it yet (a WRITE sent
// by reference excepted: the kernel may still be reading its memory).
func (e *Endpoint) Cancel(op *transport.Op) bool { return e.s.Cancel(op) }

// Consumed returns receive credits to the peer.
func (e *Endpoint) Consumed(n int) { e.s.Consumed(n) }

// Revoke tells the peer that a local region is gone.
func (e *Endpoint) Revoke(id uint32) { e.s.Revoke(id) }

// AppendSend encodes a message straight into the send queue
// (transport.Appender).
func (e *Endpoint) AppendSend(max int, fill func(b []byte) []byte) (bool, error) {
	return e.s.AppendSend(max, fill)
}

// Done is closed when the endpoint is down.
func (e *Endpoint) Done() <-chan struct{} { return e.s.Done() }

// Err reports why the endpoint is down.
func (e *Endpoint) Err() error { return e.s.Err() }

// Transport is "tcp".
func (e *Endpoint) Transport() string { return "tcp" }

// Close closes the stream and waits for its goroutines. It is idempotent,
// and does nothing on a nil endpoint.
func (e *Endpoint) Close() error {
	if e == nil {
		return nil
	}
	return e.s.Close()
}

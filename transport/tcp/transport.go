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
	return &Endpoint{Stream: s}, nil
}

// Endpoint is a tcp endpoint: all of its operations are frames on its
// stream.
type Endpoint struct {
	// The stream is the whole endpoint: tcp moves every operation over
	// it (transport.Endpoint, Appender and Counter).
	*stream.Stream
}

var (
	_ transport.Endpoint = (*Endpoint)(nil)
	_ transport.Appender = (*Endpoint)(nil)
	_ transport.Counter  = (*Endpoint)(nil)
)

// Close closes the stream and waits for its goroutines. It is idempotent,
// and does nothing on a nil endpoint.
func (e *Endpoint) Close() error {
	if e == nil {
		return nil
	}
	return e.Stream.Close()
}

package tcp

import (
	"context"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/stream"
)

// Transport is the tcp transport. It works wherever TCP does.
type Transport struct{}

var _ transport.Transport = (*Transport)(nil)

var _ transport.Announcer = (*Endpoint)(nil)

// New returns the tcp transport.
func New() *Transport { return &Transport{} }

// Name is "tcp".
func (*Transport) Name() string { return "tcp" }

// Caps is what tcp can do: it spreads a peer's operations over several
// connections, moves host memory only, and the owner's engine serves,
// and checks, every access.
var Caps = transport.Caps{
	Streams: true,
	Memory:  mem.KindSet(mem.KindHost),
	Rights:  transport.RightsByOwner,
}

// Caps returns the package's Caps.
func (*Transport) Caps() transport.Caps { return Caps }

// Devices is none: it opens no device.
func (*Transport) Devices() transport.Devices { return transport.Devices{} }

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

package tcp

import (
	"context"

	"github.com/xferio/xfer/transport"
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

// Connect builds a stream endpoint.
func (*Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	return NewEndpoint(ctx, p, Hooks{Name: "tcp"})
}

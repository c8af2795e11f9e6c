// Package verbs is xfer's RDMA transport over libibverbs.
//
// This build does not contain the verbs transport yet: Available reports
// ErrNotSupported, so the auto policy never picks it and the rdma policy
// fails with a clear error.
package verbs

import (
	"context"
	"fmt"

	"github.com/xferio/xfer/transport"
)

// Config selects and sizes the RDMA resources (seed 002's table).
type Config struct {
	Device          string
	Port            int
	GIDIndex        int // -1: automatic
	MTU             int
	MaxInlineData   int
	MaxSendWR       int
	MaxRecvWR       int
	MaxSGE          int
	QPType          string
	UseSRQ          bool
	UseEventChannel bool
}

// Transport is the rdma transport.
type Transport struct{ cfg Config }

var _ transport.Transport = (*Transport)(nil)

// New returns the rdma transport.
func New(cfg Config) *Transport { return &Transport{cfg: cfg} }

// Name is "rdma".
func (*Transport) Name() string { return "rdma" }

var errNotBuilt = fmt.Errorf("rdma: %w: this build of xfer has no verbs transport yet; use tcp or shm (transport: auto picks them)", transport.ErrNotSupported)

// Available reports why rdma cannot be used.
func (*Transport) Available() error { return errNotBuilt }

// LocalBlob is empty.
func (*Transport) LocalBlob() []byte { return nil }

// Usable reports why rdma cannot be used.
func (*Transport) Usable(local, remote transport.PeerInfo) error { return errNotBuilt }

// Connect fails.
func (*Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	p.Conn.Close()
	return nil, errNotBuilt
}

package kv

import (
	"bytes"
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// checkSession refuses requests that follow a Hello of an earlier server.
func (s *Server) checkSession(id []byte) error {
	if len(id) > 0 && !bytes.Equal(id, s.id[:]) {
		return status.Error(codes.Unavailable, "the server restarted: say Hello again")
	}
	return nil
}

// transportOf names the transport of the connection to the owner of d, the
// buffer of a request ("" when unknown).
func (s *Server) transportOf(ctx context.Context, d xfer.RegionDesc) string {
	if p, ok := ctx.Value(fromPeer{}).(*xfer.Peer); ok {
		return p.Transport()
	}
	s.peers.mu.Lock()
	p := s.peers.m[d.Owner]
	s.peers.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.Transport()
}

// fromPeer is the context key of the data-plane connection a request came
// on (none for gRPC calls).
type fromPeer struct{}

// owner returns the connection to the engine that owns buffer d. A request
// that came on the data plane may only name its own sender's buffers.
func (s *Server) owner(ctx context.Context, d xfer.RegionDesc) (*xfer.Peer, error) {
	if p, ok := ctx.Value(fromPeer{}).(*xfer.Peer); ok {
		if p.ID() != d.Owner {
			return nil, status.Errorf(codes.InvalidArgument, "buffer %s belongs to engine %s, not to the sender %s", d, d.Owner, p.ID())
		}
		return p, nil
	}
	return s.peers.get(ctx, d.Owner, s.peerWait)
}

// inlineByTransport is Hello's inline_max_by_transport.
func (s *Server) inlineByTransport() map[string]uint64 {
	if !s.inlineAuto {
		return nil
	}
	m := map[string]uint64{}
	for _, name := range xfer.TransportNames() {
		if oneCopy(name) {
			m[name] = DefaultInlineMaxSHM
		}
	}
	return m
}

// oneCopy reports whether a one-sided transfer on the transport named is
// one copy or the NIC's DMA (shm, rdma), not a pass through both engines
// (tcp): its clients get DefaultInlineMaxSHM under the default InlineMax.
func oneCopy(transport string) bool {
	c, ok := xfer.TransportCaps(transport)
	return ok && !c.OwnerServes()
}

// inlineMax is the inline limit for a client on the given transport ("" if
// unknown).
func (s *Server) inlineMax(transport string) int {
	if s.inlineAuto && oneCopy(transport) {
		return min(DefaultInlineMaxSHM, s.opts.InlineMax)
	}
	return s.opts.InlineMax
}

// Hello implements kvpb.KVServer.
func (s *Server) Hello(ctx context.Context, req *kvpb.HelloRequest) (*kvpb.HelloResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	if req.GetProtocol() < Protocol {
		return nil, status.Errorf(codes.FailedPrecondition, "client speaks KV protocol %d, this server %d", req.GetProtocol(), Protocol)
	}
	return &kvpb.HelloResponse{
		Protocol:             Protocol,
		DataAddrs:            s.DataAddrs(),
		ServerId:             s.id[:],
		MaxKey:               uint64(s.opts.MaxKey),
		MaxValue:             uint64(s.opts.MaxValue),
		InlineMax:            uint64(max(s.opts.InlineMax, 0)),
		InlineMaxByTransport: s.inlineByTransport(),
		Capacity:             s.e.Pool().Stats().Capacity,
	}, nil
}

// authorize authenticates a gRPC call (callAuth) before a handler reads or
// changes anything. The data plane's requests do not come through the
// handlers: they came on a connection that the engine's handshake
// authenticated.
func (s *Server) authorize(ctx context.Context) error { return s.auth.check(ctx) }

package kv

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// peerSet tracks the data-plane connections of clients, by engine ID.
type peerSet struct {
	mu      sync.Mutex
	m       map[xfer.ID]*xfer.Peer
	changed chan struct{} // closed and replaced on every change
}

func (ps *peerSet) set(p *xfer.Peer) {
	ps.mu.Lock()
	old := ps.m[p.ID()]
	ps.m[p.ID()] = p
	close(ps.changed)
	ps.changed = make(chan struct{})
	ps.mu.Unlock()
	if old != nil && old != p {
		old.Close() // the client reconnected; its old connection is dead
	}
}

func (ps *peerSet) drop(p *xfer.Peer) {
	ps.mu.Lock()
	if ps.m[p.ID()] == p {
		delete(ps.m, p.ID())
	}
	ps.mu.Unlock()
}

// get returns the client's connection, waiting up to peerWait for it.
func (ps *peerSet) get(ctx context.Context, id xfer.ID, wait time.Duration) (*xfer.Peer, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ps.mu.Lock()
		p, changed := ps.m[id], ps.changed
		ps.mu.Unlock()
		if p != nil {
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-timer.C:
			return nil, status.Errorf(codes.Unavailable, "client engine %s is not connected to the data plane: call Hello and dial one of its data addresses", id)
		}
	}
}

// acceptLoop accepts clients' data-plane connections and watches each until
// it goes away.
func (s *Server) acceptLoop(e *xfer.Engine, msgs *msgBufs) {
	for {
		p, err := e.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, xfer.ErrClosed) {
				return
			}
			s.log.Warn("kv: data-plane handshake failed", "err", err)
			continue
		}
		s.log.Debug("kv: client connected", "peer", p, "transport", p.Transport())
		s.peers.set(p)
		s.wg.Go(func() { s.serveMessages(p, msgs) })
	}
}

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

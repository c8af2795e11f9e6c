package kv

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer"
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

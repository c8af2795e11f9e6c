package verbs

import (
	"context"
	"fmt"
	"net"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Connect creates the QPs, exchanges their numbers with the peer over the
// handshaken connection, and brings them RESET→INIT→RTR→RTS.
func (t *Transport) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	if t.rails != nil {
		return t.rails.connect(ctx, p)
	}
	ep, err := t.connectOne(ctx, p)
	if err != nil {
		return nil, err
	}
	return ep, nil
}

// connect connects the peer over min(this side's, the peer's) rails; with
// one, the endpoint is a plain single-device one.
func (r *rails) connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	ups, err := r.up()
	if err != nil {
		p.Conn.Close()
		return nil, err
	}
	peer, err := wire.DecodeVerbsInfo(p.Remote.Blob)
	if err != nil {
		p.Conn.Close()
		return nil, fmt.Errorf("rdma: peer's device description: %w", err)
	}
	extra := p.DialExtra
	if p.Role == transport.Acceptor {
		extra = p.AcceptExtra
	}
	// Rails paired by reachability (railZero): {this side's, the peer's},
	// indexes into ups and into the peer's GIDs (its handshake GID first,
	// then RailGIDs); zero for rail 0, pairs for the others. With one rail
	// on either side, rail 0 is this side's first device and the peer's
	// handshake GID, as with a single-device peer.
	var zero [2]int
	var pairs [][2]int
	remote := append([][16]byte{peer.GID}, peer.RailGIDs...)
	if extra != nil && len(ups) > 1 && len(peer.RailGIDs) > 0 {
		local := make([][16]byte, 0, len(ups))
		for _, t := range ups {
			d, err := t.device()
			if err != nil {
				p.Conn.Close()
				return nil, fmt.Errorf("rdma: rail device %s: %w", t.cfg.Device, err)
			}
			local = append(local, d.localInfo().GID)
		}
		if p.Role == transport.Acceptor {
			zero, pairs = railZero(remote, local)
			zero[0], zero[1] = zero[1], zero[0]
			for k := range pairs {
				pairs[k][0], pairs[k][1] = pairs[k][1], pairs[k][0]
			}
		} else {
			zero, pairs = railZero(local, remote)
		}
	}
	// A rail's QP exchange must name the GID the handshake gave for the
	// peer's device it is paired with (its own handshake GID for a plain
	// rail 0).
	railParams := func(conn net.Conn, peerRail int) transport.Params {
		pi := p
		if conn != nil {
			// A rail other than rail 0 that fails is marked down, and its
			// operations go to the other rails: it never moves to its
			// control stream.
			pi.Conn, pi.Conns, pi.DialExtra, pi.AcceptExtra, pi.OnFailover = conn, 1, nil, nil, nil
		}
		if peerRail != 0 || conn != nil {
			v := *peer
			v.GID, v.RailGIDs = remote[peerRail], nil
			pi.Remote.Blob = wire.AppendVerbsInfo(nil, &v)[wire.HandshakeHeaderLen:]
		}
		return pi
	}
	ep0, err := ups[zero[0]].connectOne(ctx, railParams(nil, zero[1]))
	if err != nil {
		return nil, err
	}
	if len(pairs) == 0 {
		return ep0, nil
	}
	re := newRailEndpoint(r, 1+len(pairs))
	re.eps[0].Store(ep0)
	re.subs[0], re.names[0], re.role, re.extra = ups[zero[0]], ep0.dev.info.Name, p.Role, extra
	for k, pr := range pairs {
		i, sub := k+1, ups[pr[0]]
		conn, err := extra(ctx)
		if err != nil {
			re.Close()
			return nil, fmt.Errorf("rdma: rail %d (%s): connection for its control stream: %w", i, sub.cfg.Device, err)
		}
		pi := railParams(conn, pr[1])
		re.params[i] = pi
		re.params[i].Conn = nil
		ep, err := sub.connectOne(ctx, pi)
		if err != nil {
			re.Close()
			return nil, fmt.Errorf("rdma: rail %d (%s): %w", i, sub.cfg.Device, err)
		}
		re.eps[i].Store(ep)
		re.subs[i], re.names[i] = sub, ep.dev.info.Name
	}
	re.numa = railsNUMA(re.subs)
	re.start()
	return re, nil
}

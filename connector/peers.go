package connector

import (
	"context"
	"encoding/binary"
	"net"

	"github.com/xferio/xfer"
)

// A connector's peers: the producers it dials (dial) and the consumers it
// accepts (acceptLoop), each given the one handler of its messages.

// dial returns the producer at addr, connected, with this connector's
// handlers on its messages and notifications.
func (c *Connector) dial(ctx context.Context, addr string) (*remote, error) {
	p, err := c.eng.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, net.ErrClosed
	}
	r := c.remote[p]
	if r == nil {
		r = &remote{peer: p, calls: make(map[uint32]*pending)}
		c.remote[p] = r
		p.Handle(c.handler(p))
		p.HandleNotify(func(n xfer.Notification) {
			if !r.deliver(n.Value, result{notified: true}) {
				c.log.Warn("connector: a producer notified an unknown get", "peer", p.String(), "id", n.Value)
			}
		})
	}
	return r, nil
}

// handler receives the messages of peer p: requests from consumers,
// answers from producers.
func (c *Connector) handler(p *xfer.Peer) func([]byte) {
	return func(msg []byte) {
		if len(msg) > 0 && msg[0] == msgInfo {
			c.onReply(p, msg)
			return
		}
		req, err := parseRequest(msg)
		if err != nil {
			c.log.Warn("connector: a malformed request", "peer", p.String(), "err", err)
			if len(msg) >= 5 && msg[0] == msgGet {
				c.mu.Lock()
				if !c.closed {
					id := binary.LittleEndian.Uint32(msg[1:5])
					c.answerLocked(p, id, statusRefused, nil, xfer.RemoteAddr{}, err.Error(), true)
				}
				c.mu.Unlock()
			}
			return
		}
		c.onRequest(p, req)
	}
}

// acceptLoop takes the consumers that dial this producer.
func (c *Connector) acceptLoop() {
	for {
		p, err := c.eng.Accept(c.ctx)
		if err != nil {
			return
		}
		p.Handle(c.handler(p))
		down := p.Down()
		c.wg.Go(func() {
			select {
			case <-down:
				c.peerGone(p)
			case <-c.ctx.Done():
			}
		})
	}
}

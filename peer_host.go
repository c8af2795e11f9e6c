package xfer

import (
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// The engine as a peer's endpoint sees it (transport.Host): every access
// a peer makes is resolved here, and its messages delivered.

// host is the transport.Host a peer's endpoint serves requests with.
func (p *Peer) host() transport.Host { return peerHost{p} }

type peerHost struct{ p *Peer }

var (
	_ transport.Host           = peerHost{}
	_ transport.Exporter       = peerHost{}
	_ transport.ExportReceiver = peerHost{}
)

func (h peerHost) Resolve(id uint32, key, addr, n uint64, want Access) (transport.Resolved, error) {
	r, err := h.p.e.resolve(id, key, addr, n, want)
	if err == nil && h.p.e.metrics != nil {
		h.p.stats.Served(want == AccessRead, n)
	}
	return r, err
}

func (h peerHost) Lookup(id uint32, key uint64, want Access) (transport.Resolved, error) {
	return h.p.e.regions.Lookup(id, key, want)
}

func (h peerHost) Deliver(ep transport.Endpoint, msg []byte) {
	p := h.p
	if f := p.inbox.Handler(); f != nil {
		if p.e.metrics != nil {
			p.stats.Handled(len(msg))
		}
		f(msg)
		ep.Consumed(1)
		return
	}
	p.inbox.Deliver(ep, msg)
}

func (h peerHost) Notify(_ transport.Endpoint, n transport.Notification) {
	note := Notification{Peer: h.p, Value: n.Value, Region: n.Region, Addr: n.Addr, Len: n.Len}
	if f := h.p.notify.Load(); f != nil {
		(*f)(note)
		return
	}
	h.p.e.notes.Push(h.p, note)
}

// Exports lists the descriptors of the regions the engine exports (what a
// Welcome advertises). The rdma transport sends their rkeys with its queue
// pair numbers, so that a peer's first access to one needs no attach.
func (h peerHost) Exports() []transport.RegionKey {
	e := h.p.e
	e.exportMu.RLock()
	defer e.exportMu.RUnlock()
	out := make([]transport.RegionKey, 0, len(e.exports))
	for _, x := range e.exports {
		out = append(out, transport.RegionKey{ID: x.Desc.ID, Key: x.Desc.Key, Access: transport.Access(x.Desc.Access)})
	}
	return out
}

// ReceiveExport records a region the peer exported after the handshake
// (Peer.Region finds it).
func (h peerHost) ReceiveExport(b []byte) error {
	x, err := wire.DecodeExport(b)
	if err != nil {
		return err
	}
	return h.p.addExport(x)
}

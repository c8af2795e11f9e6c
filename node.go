package xfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/wire"
)

// openNode opens the engine's directory and registers the engine in it.
func (e *Engine) openNode(ctx context.Context) error {
	o := directory.Options{TTL: e.cfg.DirectoryTTL, Logger: e.log}
	if e.cfg.Directory != "p2p" {
		var err error
		if o.Token, err = e.cfg.DirectoryToken(); err != nil {
			return fmt.Errorf("open: %w", err)
		}
		if o.TLS, err = e.cfg.DirectoryTLS(); err != nil {
			return fmt.Errorf("open: %w", err)
		}
	}
	n, err := directory.OpenNode(ctx, e.cfg.Directory, e.cfg.NodeID, o, e.entry)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	e.node.Store(n)
	return nil
}

// deregisterTimeout bounds the removal of the engine's entry at Close: it
// only saves the entry's TTL, so a directory that cannot be reached must
// not hold Close (or an xfer serve's exit) for long.
const deregisterTimeout = 2 * time.Second

// closeNode removes the engine's entry (at once, rather than when it
// expires) and closes the directory.
func (e *Engine) closeNode() error {
	return e.node.Load().Close(min(e.cfg.HandshakeTimeout, deregisterTimeout))
}

// registration is the state of the engine's entry in its directory, when
// it registered one.
func (e *Engine) registration() (directory.Registration, bool) {
	return e.node.Load().Registration()
}

// NodeID is the engine's node ID in the directory (Config.NodeID), or "".
func (e *Engine) NodeID() string { return e.cfg.NodeID }

// Entry is the directory entry the engine publishes under its NodeID: its
// advertised address (every address of the host's interfaces, loopback
// last, when it listens on a wildcard address without Config.Advertise),
// the transports its policy offers, its exports' names and sizes, and its
// services (SetService). It carries no region key and no secret: peers get
// the exports' descriptors from the handshake, which authenticates them.
func (e *Engine) Entry() directory.Entry {
	n := e.node.Load()
	if n == nil {
		ent := e.entry()
		ent.NodeID = e.cfg.NodeID
		return ent
	}
	return n.Entry()
}

// entry is the engine's entry less its node ID and services.
func (e *Engine) entry() directory.Entry {
	ent := directory.Entry{Addrs: directory.AdvertisedAddrs(e.addr), Transports: e.offeredTransports()}
	e.exportMu.RLock()
	for _, x := range e.exports {
		ent.Exports = append(ent.Exports, directory.Export{Name: x.Name, Len: x.Desc.Len})
	}
	e.exportMu.RUnlock()
	return ent
}

// Publish writes the engine's current entry (Entry) to the directory.
// Open does so, and Export and SetService call it; a program calls it
// itself only to learn whether an Export's update reached the directory.
// Without a directory or a NodeID it does nothing.
func (e *Engine) Publish(ctx context.Context) error {
	return e.node.Load().Publish(ctx)
}

// publishLater publishes the entry after a change that has no context of
// its own (Export), within the handshake timeout; a failure is logged.
func (e *Engine) publishLater(what string) {
	if n := e.node.Load(); n.Directory() == nil || n.ID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.HandshakeTimeout)
	defer cancel()
	if err := e.Publish(ctx); err != nil && !errors.Is(err, ErrClosed) {
		e.log.Warn("the directory entry was not updated", "after", what, "err", err)
	}
}

// SetService lists a service of this node in its directory entry (name, of
// [a-z0-9_-], → host:port), such as a KV server's gRPC address ("kv"), and
// publishes the entry; an empty addr removes it. A wildcard host is
// replaced by the host of the engine's first advertised address.
func (e *Engine) SetService(ctx context.Context, name, addr string) error {
	if addr != "" {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				if h, _, err := net.SplitHostPort(directory.AdvertisedAddrs(e.addr)[0]); err == nil {
					addr = net.JoinHostPort(h, port)
				}
			}
		}
	}
	n := e.node.Load()
	if n == nil {
		return fmt.Errorf("service %s: %w", name, ErrClosed)
	}
	return n.SetService(ctx, name, addr)
}

// Directory is the engine's directory client (Config.Directory), through
// which a program can List or Watch the nodes; nil under p2p. The engine
// owns it: do not close it.
func (e *Engine) Directory() directory.Directory {
	return e.node.Load().Directory()
}

// LookupNode returns node id's directory entry. Its errors match
// ErrUnknownNode (no live entry: never registered, deregistered or
// expired), ErrNoDirectory (the engine has none) or, when the directory
// cannot be reached, ErrDirectoryUnavailable.
func (e *Engine) LookupNode(ctx context.Context, id string) (directory.Entry, error) {
	d := e.Directory()
	if d == nil {
		return directory.Entry{}, fmt.Errorf("node %s: %w", id, ErrNoDirectory)
	}
	ent, err := d.Lookup(ctx, id)
	switch {
	case err == nil:
		return ent, nil
	case errors.Is(err, directory.ErrNotFound):
		return ent, fmt.Errorf("node %s: %w in directory %s", id, ErrUnknownNode, e.node.Load().URL())
	case errors.Is(err, directory.ErrInvalid):
		return ent, fmt.Errorf("node %s: %w", id, err)
	case errors.Is(err, directory.ErrClosed):
		return ent, fmt.Errorf("node %s: %w", id, ErrClosed)
	}
	return ent, fmt.Errorf("node %s: %w: directory %s: %w", id, ErrDirectoryUnavailable, e.node.Load().URL(), err)
}

// DialNode looks node id up in the directory and dials it: its addresses
// in order, until one answers (Dial). The handshake authenticates the node
// as Dial does, so an entry that a node without the secret forged fails
// with ErrAuth. Errors: ErrUnknownNode, ErrNoDirectory,
// ErrDirectoryUnavailable (from LookupNode), or the dial's error for the
// last address, which names the node and its addresses (a node whose entry
// has not expired yet but which is gone: connection refused).
func (e *Engine) DialNode(ctx context.Context, id string) (*Peer, error) {
	ent, err := e.LookupNode(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dial %w", err)
	}
	for i, a := range ent.Addrs {
		p, derr := e.Dial(ctx, a)
		if derr == nil {
			return p, nil
		}
		err = derr
		if errors.Is(derr, ErrAuth) || errors.Is(derr, ErrVersion) || ctx.Err() != nil || i == len(ent.Addrs)-1 {
			break
		}
	}
	return nil, fmt.Errorf("dial node %s at %s: %w", id, strings.Join(ent.Addrs, ", "), err)
}

// offeredTransports lists what the engine's policy offers, best first.
func (e *Engine) offeredTransports() []string {
	if e.cfg.Transport != PolicyAuto {
		return []string{string(e.cfg.Transport)}
	}
	var ts []string
	for _, t := range transportNames() {
		if tr := e.transports[t]; tr != nil && tr.Available() == nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// Export advertises r under name: to peers that connect from now on, in
// their handshake, and to the peers connected now, over their connection;
// they find it with Peer.Region. An engine registered in a directory lists
// the name and size in its entry too (Publish), so that a peer can find the
// region by node and name: DialNode, then Peer.Region.
func (e *Engine) Export(name string, r *Region) {
	x := wire.Export{Name: name, Desc: r.Desc().wire()}
	e.exportMu.Lock()
	found := false
	for i := range e.exports {
		if e.exports[i].Name == name {
			e.exports[i] = x
			found = true
			break
		}
	}
	if !found {
		e.exports = append(e.exports, x)
	}
	e.exportN++
	e.exportMu.Unlock()
	b := wire.AppendExport(nil, &x)
	for _, p := range e.Peers() {
		p.announce(b)
	}
	e.publishLater("export " + name)
}

package xfer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xferio/xfer/directory"
)

// node is an engine's place in the directory (Config.Directory): the
// backend it resolves node IDs with and, when it has a NodeID, the entry it
// registered.
type node struct {
	dir directory.Directory // nil under p2p
	url string
	id  string // Config.NodeID; "" when the engine does not register

	pub      sync.Mutex // serialises building and publishing the entry
	mu       sync.Mutex // guards services and closed
	services map[string]string
	closed   bool
}

// openNode opens the engine's directory and registers the engine in it.
func (e *Engine) openNode(ctx context.Context) error {
	e.node.url, e.node.id = e.cfg.Directory, e.cfg.NodeID
	if e.cfg.Directory == "p2p" {
		return nil
	}
	token, err := e.cfg.DirectoryToken()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	tlsCfg, err := e.cfg.DirectoryTLS()
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	d, err := directory.Open(ctx, e.cfg.Directory, directory.Options{TTL: e.cfg.DirectoryTTL, Logger: e.log, Token: token, TLS: tlsCfg})
	if err != nil {
		return fmt.Errorf("open: directory: %w", err)
	}
	e.node.dir = d
	if e.node.id == "" {
		return nil
	}
	if err := e.Publish(ctx); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	return nil
}

// deregisterTimeout bounds the removal of the engine's entry at Close: it
// only saves the entry's TTL, so a directory that cannot be reached must
// not hold Close (or an xfer serve's exit) for long.
const deregisterTimeout = 2 * time.Second

// closeNode removes the engine's entry (at once, rather than when it
// expires) and closes the directory.
func (e *Engine) closeNode() error {
	n := &e.node
	if n.dir == nil {
		return nil
	}
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.pub.Lock() // let a Publish under way finish before the entry goes
	defer n.pub.Unlock()
	var err error
	// Only an entry this engine registered: when another node holds the
	// ID (Open failed for that), its entry is not this engine's to remove.
	if _, ok := e.registration(); ok {
		ctx, cancel := context.WithTimeout(context.Background(), min(e.cfg.HandshakeTimeout, deregisterTimeout))
		err = n.dir.Deregister(ctx, n.id)
		cancel()
		if errors.Is(err, directory.ErrNotFound) {
			err = nil // it had expired already
		}
	}
	return errors.Join(err, n.dir.Close())
}

// registration is the state of the engine's entry in its directory, when
// it registered one.
func (e *Engine) registration() (directory.Registration, bool) {
	if e.node.dir == nil || e.node.id == "" {
		return directory.Registration{}, false
	}
	for _, r := range e.node.dir.Registrations() {
		if r.NodeID == e.node.id {
			return r, true
		}
	}
	return directory.Registration{}, false
}

// NodeID is the engine's node ID in the directory (Config.NodeID), or "".
func (e *Engine) NodeID() string { return e.node.id }

// Entry is the directory entry the engine publishes under its NodeID: its
// advertised address (every address of the host's interfaces, loopback
// last, when it listens on a wildcard address without Config.Advertise),
// the transports its policy offers, its exports' names and sizes, and its
// services (SetService). It carries no region key and no secret: peers get
// the exports' descriptors from the handshake, which authenticates them.
func (e *Engine) Entry() directory.Entry {
	ent := directory.Entry{NodeID: e.node.id, Addrs: advertisedAddrs(e.addr), Transports: e.offeredTransports()}
	e.exportMu.RLock()
	for _, x := range e.exports {
		ent.Exports = append(ent.Exports, directory.Export{Name: x.Name, Len: x.Desc.Len})
	}
	e.exportMu.RUnlock()
	e.node.mu.Lock()
	if len(e.node.services) > 0 {
		ent.Services = maps.Clone(e.node.services)
	}
	e.node.mu.Unlock()
	return ent
}

// Publish writes the engine's current entry (Entry) to the directory.
// Open does so, and Export and SetService call it; a program calls it
// itself only to learn whether an Export's update reached the directory.
// Without a directory or a NodeID it does nothing.
func (e *Engine) Publish(ctx context.Context) error {
	n := &e.node
	if n.dir == nil || n.id == "" {
		return nil
	}
	n.pub.Lock()
	defer n.pub.Unlock()
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return fmt.Errorf("publish node %s: %w", n.id, ErrClosed)
	}
	if err := n.dir.Register(ctx, e.Entry()); err != nil {
		return fmt.Errorf("register node %s in directory %s: %w", n.id, n.url, err)
	}
	return nil
}

// publishLater publishes the entry after a change that has no context of
// its own (Export), within the handshake timeout; a failure is logged.
func (e *Engine) publishLater(what string) {
	if e.node.dir == nil || e.node.id == "" {
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
				if h, _, err := net.SplitHostPort(advertisedAddrs(e.addr)[0]); err == nil {
					addr = net.JoinHostPort(h, port)
				}
			}
		}
	}
	e.node.mu.Lock()
	old := maps.Clone(e.node.services)
	if addr == "" {
		delete(e.node.services, name)
	} else {
		if e.node.services == nil {
			e.node.services = map[string]string{}
		}
		e.node.services[name] = addr
	}
	e.node.mu.Unlock()
	if e.node.id != "" {
		ent := e.Entry()
		if err := ent.Check(); err != nil {
			e.node.mu.Lock()
			e.node.services = old
			e.node.mu.Unlock()
			return fmt.Errorf("service %s: %w", name, err)
		}
	}
	return e.Publish(ctx)
}

// Directory is the engine's directory client (Config.Directory), through
// which a program can List or Watch the nodes; nil under p2p. The engine
// owns it: do not close it.
func (e *Engine) Directory() directory.Directory { return e.node.dir }

// LookupNode returns node id's directory entry. Its errors match
// ErrUnknownNode (no live entry: never registered, deregistered or
// expired), ErrNoDirectory (the engine has none) or, when the directory
// cannot be reached, ErrDirectoryUnavailable.
func (e *Engine) LookupNode(ctx context.Context, id string) (directory.Entry, error) {
	if e.node.dir == nil {
		return directory.Entry{}, fmt.Errorf("node %s: %w", id, ErrNoDirectory)
	}
	ent, err := e.node.dir.Lookup(ctx, id)
	switch {
	case err == nil:
		return ent, nil
	case errors.Is(err, directory.ErrNotFound):
		return ent, fmt.Errorf("node %s: %w in directory %s", id, ErrUnknownNode, e.node.url)
	case errors.Is(err, directory.ErrInvalid):
		return ent, fmt.Errorf("node %s: %w", id, err)
	case errors.Is(err, directory.ErrClosed):
		return ent, fmt.Errorf("node %s: %w", id, ErrClosed)
	}
	return ent, fmt.Errorf("node %s: %w: directory %s: %w", id, ErrDirectoryUnavailable, e.node.url, err)
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

// advertisedAddrs is where peers reach an engine whose address is addr:
// addr itself, or, when its host is a wildcard, every address of the
// host's interfaces that are up (global ones first, loopback last), at
// most directory.MaxAddrs.
func advertisedAddrs(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return []string{addr}
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{addr}
	}
	var global, loop []string
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		as, _ := ifc.Addrs()
		for _, a := range as {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsMulticast() {
				continue
			}
			s := net.JoinHostPort(ipn.IP.String(), port)
			if ipn.IP.IsLoopback() {
				loop = append(loop, s)
			} else {
				global = append(global, s)
			}
		}
	}
	all := append(global, loop...)
	if len(all) == 0 {
		return []string{net.JoinHostPort("127.0.0.1", port)}
	}
	return slices.Clip(all[:min(len(all), directory.MaxAddrs)])
}

package directory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"
)

// Node is one process's membership in a directory: the backend it
// resolves node IDs with and, when it has a node ID, the entry it keeps
// registered there. Its methods are safe for concurrent use; Publish and
// Close are serialised, so that an entry is never written after Close
// removed it.
type Node struct {
	dir   Directory // nil under p2p
	url   string
	id    string       // "" when the process does not register
	entry func() Entry // the process's entry, less its ID and services

	pub      sync.Mutex // serialises building and publishing the entry
	mu       sync.Mutex // guards services and closed
	services map[string]string
	closed   bool
}

// OpenNode opens the directory at url (none under "p2p") and, with a node
// id, registers entry's entry under it. entry is called for every Publish:
// it returns the process's addresses, transports and exports; the node
// adds its ID and services.
func OpenNode(ctx context.Context, url, id string, o Options, entry func() Entry) (*Node, error) {
	n := &Node{url: url, id: id, entry: entry}
	if url == "p2p" {
		return n, nil
	}
	d, err := Open(ctx, url, o)
	if err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	n.dir = d
	if id == "" {
		return n, nil
	}
	if err := n.Publish(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return n, nil
}

// Directory is the backend; nil under p2p, and for a nil Node.
func (n *Node) Directory() Directory {
	if n == nil {
		return nil
	}
	return n.dir
}

// URL is the directory's URL; "" for a nil Node.
func (n *Node) URL() string {
	if n == nil {
		return ""
	}
	return n.url
}

// ID is the node ID the process registers under, or "".
func (n *Node) ID() string {
	if n == nil {
		return ""
	}
	return n.id
}

// Entry is the entry Publish writes: entry's, with the node's ID and
// services.
func (n *Node) Entry() Entry {
	ent := n.entry()
	ent.NodeID = n.id
	n.mu.Lock()
	if len(n.services) > 0 {
		ent.Services = maps.Clone(n.services)
	}
	n.mu.Unlock()
	return ent
}

// Publish writes the current entry (Entry) to the directory. Without a
// directory or a node ID it does nothing; after Close its error matches
// net.ErrClosed. A nil Node publishes nothing.
func (n *Node) Publish(ctx context.Context) error {
	if n == nil || n.dir == nil || n.id == "" {
		return nil
	}
	n.pub.Lock()
	defer n.pub.Unlock()
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return fmt.Errorf("publish node %s: %w", n.id, net.ErrClosed)
	}
	if err := n.dir.Register(ctx, n.Entry()); err != nil {
		return fmt.Errorf("register node %s in directory %s: %w", n.id, n.url, err)
	}
	return nil
}

// SetService lists a service (name → host:port) in the entry, or removes
// it when addr is empty, and publishes the entry. A service that would
// make the entry invalid (Entry.Check) is refused, and the entry is left
// as it was.
func (n *Node) SetService(ctx context.Context, name, addr string) error {
	n.mu.Lock()
	old := maps.Clone(n.services)
	if addr == "" {
		delete(n.services, name)
	} else {
		if n.services == nil {
			n.services = map[string]string{}
		}
		n.services[name] = addr
	}
	n.mu.Unlock()
	if n.id != "" {
		ent := n.Entry()
		if err := ent.Check(); err != nil {
			n.mu.Lock()
			n.services = old
			n.mu.Unlock()
			return fmt.Errorf("service %s: %w", name, err)
		}
	}
	return n.Publish(ctx)
}

// Registration is the state of the node's entry in the directory, when
// this process registered one.
func (n *Node) Registration() (Registration, bool) {
	if n == nil || n.dir == nil || n.id == "" {
		return Registration{}, false
	}
	for _, r := range n.dir.Registrations() {
		if r.NodeID == n.id {
			return r, true
		}
	}
	return Registration{}, false
}

// Close removes the node's entry, within timeout (it only saves the
// entry's TTL, so a directory that cannot be reached must not hold a
// process's exit for long), and closes the directory. A Publish under way
// finishes first.
func (n *Node) Close(timeout time.Duration) error {
	if n == nil || n.dir == nil {
		return nil
	}
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.pub.Lock()
	defer n.pub.Unlock()
	var err error
	// Only an entry this process registered: when another node holds the
	// ID, its entry is not this one's to remove.
	if _, ok := n.Registration(); ok {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = n.dir.Deregister(ctx, n.id)
		cancel()
		if errors.Is(err, ErrNotFound) {
			err = nil // it had expired already
		}
	}
	return errors.Join(err, n.dir.Close())
}

// AdvertisedAddrs is where peers reach a process listening on addr: addr
// itself, or, when its host is a wildcard, every address of the host's
// interfaces that are up (global ones first, loopback last), at most
// MaxAddrs.
func AdvertisedAddrs(addr string) []string {
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
	return slices.Clip(all[:min(len(all), MaxAddrs)])
}

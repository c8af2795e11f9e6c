package negotiate

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// Auto is the policy that offers and accepts every transport, best first.
const Auto = "auto"

// ErrNoTransport is Offers' and Offer's error when nothing can be
// offered: the root package's ErrNoTransport.
var ErrNoTransport = handshake.ErrNoTransport

// Table is what an engine offers and accepts: its transports, its policy
// and its allowlist of GIDs.
type Table struct {
	// Names lists the transports of the engine's table, best first (the
	// auto policy's order).
	Names []string
	// Transports are the engine's transports by name, the extra one
	// included.
	Transports map[string]transport.Transport
	// Extra names the extra transport (offered first, accepted whatever
	// the policy), or "".
	Extra string
	// Policy is this engine's policy: Auto or a transport's name.
	Policy string
	// AllowedGIDs is security.rdma.allowed_gids; none: every GID.
	AllowedGIDs [][16]byte
	// PeerGIDs returns the GIDs a peer's handshake blob for transport name
	// gives (one per device it connects over); nil for a transport
	// without GIDs.
	PeerGIDs func(name string) func(blob []byte) ([][16]byte, error)
	// Available says whether a transport can be used here now
	// (transport.Transport.Available, unless a test refuses it).
	Available func(t transport.Transport) error
	// NotAllowed hears of a peer refused for its GID.
	NotAllowed func(peer string, err error)
	// FellBack hears of a transport passed over for a peer under the
	// auto policy: full when its device had no room (transport.ErrNoRoom),
	// else it was not usable with the peer.
	FellBack func(peer, name string, full bool, err error)
	Log      *slog.Logger
}

// Offers lists the transports to propose, best first, under policy, less
// those in exclude (each with the error that excluded it).
func (n *Table) Offers(policy string, exclude map[string]error) ([]wire.TransportOffer, error) {
	names := []string{policy}
	if policy == Auto {
		names = n.Names
	}
	if n.Extra != "" {
		names = append([]string{n.Extra}, names...)
	}
	var out []wire.TransportOffer
	var errs []error
	for _, name := range names {
		if err := exclude[name]; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		t := n.Transports[name]
		if err := n.Available(t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			n.Log.Debug("a transport is not available: not offered", "transport", name, "reason", err)
			continue
		}
		out = append(out, wire.TransportOffer{Name: name, Blob: t.LocalBlob()})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w under policy %s: %w", ErrNoTransport, policy, errors.Join(errs...))
	}
	return out, nil
}

// Offer is the offer of transport name alone (a paused transport's probe).
func (n *Table) Offer(name string) ([]wire.TransportOffer, error) {
	t := n.Transports[name]
	if t == nil {
		return nil, fmt.Errorf("%w: no transport %q", ErrNoTransport, name)
	}
	if err := n.Available(t); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []wire.TransportOffer{{Name: name, Blob: t.LocalBlob()}}, nil
}

// Choose picks the transport for an inbound peer: the dialer's preference
// order, restricted by this engine's policy and what both can use. With
// none, it says why, transport by transport.
func (n *Table) Choose(h *wire.Hello, local, remote transport.PeerInfo) (transport.Transport, string) {
	var reasons []string
	for _, o := range h.Transports {
		t := n.Transports[o.Name]
		if t == nil {
			reasons = append(reasons, o.Name+": unknown")
			continue
		}
		if n.Policy != Auto && o.Name != n.Policy && o.Name != n.Extra {
			reasons = append(reasons, fmt.Sprintf("%s: this engine's policy is %s", o.Name, n.Policy))
			continue
		}
		if err := t.Available(); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", o.Name, err))
			n.Log.Debug("a transport the peer offered is not available here", "peer", PeerName(remote), "transport", o.Name, "reason", err)
			continue
		}
		if err := n.GIDAllowed(o.Name, o.Blob); err != nil {
			reasons = append(reasons, err.Error())
			n.NotAllowed(PeerName(remote), err)
			continue
		}
		r := remote
		r.Blob = o.Blob
		if err := t.Usable(local, r); err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", o.Name, err))
			if h.Policy != Auto {
				continue
			}
			// A full device (rdma's completion queues) gives the peer the
			// next transport, as if this one could not reach it.
			n.FellBack(PeerName(remote), o.Name, errors.Is(err, transport.ErrNoRoom), err)
			continue
		}
		return t, ""
	}
	if len(reasons) == 0 {
		return nil, "the peer offered no transport"
	}
	return nil, fmt.Sprint(reasons)
}

// GIDAllowed checks the GIDs in a peer's handshake blob for transport name
// against the allowlist: nil when there is no list, the transport has no
// GIDs, or every GID is on the list.
func (n *Table) GIDAllowed(name string, blob []byte) error {
	if len(n.AllowedGIDs) == 0 {
		return nil
	}
	gidsOf := n.PeerGIDs(name)
	if gidsOf == nil {
		return nil
	}
	gids, err := gidsOf(blob)
	if err != nil {
		return fmt.Errorf("%s: the peer's description: %w", name, err)
	}
	for _, gid := range gids {
		if !slices.Contains(n.AllowedGIDs, gid) {
			return fmt.Errorf("%s: the peer's GID %s is not in security.rdma.allowed_gids", name, net.IP(gid[:]))
		}
	}
	return nil
}

// Blob is the blob the hello offers with transport name, or nil.
func Blob(h *wire.Hello, name string) []byte {
	for _, o := range h.Transports {
		if o.Name == name {
			return o.Blob
		}
	}
	return nil
}

// Offered reports whether the hello offered transport name.
func Offered(h *wire.Hello, name string) bool {
	for _, o := range h.Transports {
		if o.Name == name {
			return true
		}
	}
	return false
}

// AcceptedPolicy is the policy an accepted connection follows: auto when
// both the dialer's (its hello's) and this engine's are auto, else the
// dialer's.
func AcceptedPolicy(hello, own string) string {
	if hello == Auto && own == Auto {
		return Auto
	}
	return hello
}

// PeerName names an inbound peer in logs: the address it listens on, or
// its engine ID when it does not listen.
func PeerName(p transport.PeerInfo) string {
	if p.Addr != "" {
		return p.Addr
	}
	return fmt.Sprintf("%x", p.ID[:8]) // as ID.String
}

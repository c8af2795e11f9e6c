package transport

import (
	"fmt"

	"github.com/xferio/xfer/mem"
)

// Caps are what a transport can do. Each transport states its own
// (Transport.Caps, and a variable of its package that the engine's
// transport table reads before any transport is built), and the engine
// acts on them: which peers a transport can reach, how many connections
// it spreads over, which memory it moves itself, and who keeps a peer to
// a region's rights.
type Caps struct {
	// SameHost is set for a transport that connects peers on one host
	// only (shm).
	SameHost bool `json:"same_host"`
	// Streams is set for a transport that spreads a peer's operations
	// over several TCP connections (Params.Conns, the tcp section's
	// conns); the others get one connection, for control.
	Streams bool `json:"streams"`
	// MapsMemory is set for a transport that maps the peer's regions into
	// this process (shm): it needs every region backed by a memfd that it
	// can pass to the peer.
	MapsMemory bool `json:"maps_memory"`
	// Memory is the kinds of memory the transport moves itself. The
	// engine stages the other kinds through host memory where it can
	// (GPU memory over tcp), and refuses an operation it cannot stage.
	Memory mem.Kinds `json:"memory"`
	// Rights says who keeps a peer to a region's access rights.
	Rights Rights `json:"rights"`
}

// OwnerServes reports whether the owner's engine serves every one-sided
// access itself (RightsByOwner: a stream transport, where a WRITE's bytes
// pass through both engines), rather than the peer reaching the region by
// a mapping (one copy) or by the NIC's DMA.
func (c Caps) OwnerServes() bool { return c.Rights == RightsByOwner }

// Rights says what keeps a peer from touching a region beyond the rights
// it grants (read-only, say).
type Rights uint8

const (
	// RightsByPeer: only the peer's own engine keeps to the rights; a
	// hostile peer need not. The transport exposes the whole region.
	RightsByPeer Rights = iota
	// RightsByOwner: the owner's engine checks every access before it
	// touches a byte (stream transports: the owner serves each access).
	RightsByOwner
	// RightsByKernel: the kernel does; the peer's mapping grants no more
	// than the region's rights.
	RightsByKernel
	// RightsByNIC: the NIC does; the memory registration grants no more
	// than the region's rights.
	RightsByNIC
)

// String is "peer", "owner", "kernel" or "nic".
func (r Rights) String() string {
	switch r {
	case RightsByPeer:
		return "peer"
	case RightsByOwner:
		return "owner"
	case RightsByKernel:
		return "kernel"
	case RightsByNIC:
		return "nic"
	}
	return "unknown"
}

// MarshalText implements encoding.TextMarshaler (String).
func (r Rights) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: a name String gives.
func (r *Rights) UnmarshalText(text []byte) error {
	for v := RightsByPeer; v <= RightsByNIC; v++ {
		if v.String() == string(text) {
			*r = v
			return nil
		}
	}
	return fmt.Errorf("rights %q: want peer, owner, kernel or nic", text)
}

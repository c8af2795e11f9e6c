package transport

import (
	"errors"
	"fmt"
	"net"

	"github.com/xferio/xfer/internal/sys"
)

var (
	// ErrNotSupported means a transport or feature cannot work on this host
	// or build. The wrapping error says why. It is the same value as the
	// ErrNotSupported of internal/ibv, internal/sys and mem, so a
	// not-supported error from any layer matches it.
	ErrNotSupported = sys.ErrNotSupported
	// ErrRemoteAccess means the target refused a one-sided access: unknown
	// region, wrong key, missing rights, or an address outside the region.
	// Nothing was read or written.
	ErrRemoteAccess = errors.New("remote access error")
	// ErrProtocol means a peer sent something that does not follow the
	// protocol. The connection that carried it is closed.
	ErrProtocol = errors.New("protocol error")
	// ErrTooLarge means a message or transfer exceeds a negotiated limit.
	ErrTooLarge = errors.New("too large")
	// ErrNotRegistered means a local buffer does not lie in registered
	// memory.
	ErrNotRegistered = errors.New("buffer is not in registered memory")
	// ErrNoRoom means a transport cannot take one more peer now: a
	// resource its peers share is used up (rdma: the device's completion
	// queues are full). It is not the peer's fault, nor a limit of one
	// transfer: under the auto policy the engine connects the peer over
	// the next transport instead, and counts a fallback (reason full);
	// an acceptor's Usable returns it to have the next transport chosen.
	ErrNoRoom = errors.New("no room for another peer")
	// ErrTransient means a connection setup failed in a way that a fresh
	// attempt may not: the peer's connection manager refused, dropped or
	// could not reach a connection being set up. The engine dials again,
	// with a new handshake, a bounded number of times.
	ErrTransient = errors.New("transient connection setup failure")
)

// AccessKind says why a remote access was refused.
type AccessKind uint8

const (
	UnknownRegion AccessKind = iota + 1
	WrongKey
	NoAccess
	OutOfRange
)

func (k AccessKind) String() string {
	switch k {
	case UnknownRegion:
		return "unknown region"
	case WrongKey:
		return "wrong key"
	case NoAccess:
		return "access denied"
	case OutOfRange:
		return "address out of range"
	}
	return "refused"
}

// AccessError is a refused remote access. It matches ErrRemoteAccess.
type AccessError struct {
	Kind   AccessKind
	Want   Access
	Region uint32
	Addr   uint64
	Len    uint64
}

func (e *AccessError) Error() string {
	if e.Kind == NoAccess {
		return fmt.Sprintf("remote access error: region %d does not grant %s access", e.Region, e.Want)
	}
	return fmt.Sprintf("remote access error: %s (region %d, addr %#x, len %d)", e.Kind, e.Region, e.Addr, e.Len)
}

// Is makes errors.Is(err, ErrRemoteAccess) true.
func (e *AccessError) Is(target error) bool { return target == ErrRemoteAccess }

// ErrPathFailed means an operation was in flight on a data path that
// failed while its connection carried on over another (an rdma endpoint
// moving to its control stream: Params.OnFailover). Operations that are
// safe to repeat are repeated instead; one that is not (a message, a
// write-with-notify) fails with it, since the peer may have had it.
var ErrPathFailed = errors.New("data path failed under the operation")

// ErrPeerLost means the connection to the peer failed (reset, EOF, timeout).
// Errors that match it also match net.ErrClosed.
var ErrPeerLost = errors.New("peer connection lost")

// LinkError is why an endpoint went down. It matches net.ErrClosed, and
// ErrPeerLost when the peer (not a local Close) ended it.
type LinkError struct {
	Peer  string // the peer's address or ID
	Local bool   // closed locally
	Cause error
}

func (e *LinkError) Error() string {
	if e.Local {
		return fmt.Sprintf("connection to %s closed", e.Peer)
	}
	if e.Cause != nil {
		return fmt.Sprintf("connection to %s lost: %v", e.Peer, e.Cause)
	}
	return fmt.Sprintf("connection to %s lost", e.Peer)
}

func (e *LinkError) Unwrap() error { return e.Cause }

// Is matches net.ErrClosed always, and ErrPeerLost unless closed locally.
func (e *LinkError) Is(target error) bool {
	return target == net.ErrClosed || (target == ErrPeerLost && !e.Local)
}

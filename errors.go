package xfer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/watchdog"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Sentinel errors. Match them with errors.Is; the errors returned carry
// more detail (the operation, the peer, sizes).
var (
	// ErrClosed is returned for operations on a closed engine or peer, and for
	// operations still in flight when it was closed. It is net.ErrClosed.
	ErrClosed = net.ErrClosed
	// ErrNotSupported means a transport or feature cannot work here; the
	// error says why. Every layer's not-supported error matches it: it is
	// the same value as mem.ErrNotSupported and transport.ErrNotSupported.
	ErrNotSupported = transport.ErrNotSupported
	// ErrRemoteAccess means the target refused a one-sided access (unknown
	// region, wrong key, missing rights, out of range); nothing was touched.
	ErrRemoteAccess = transport.ErrRemoteAccess
	// ErrProtocol means a peer broke the protocol.
	ErrProtocol = transport.ErrProtocol
	// ErrTooLarge means a message or transfer exceeds a limit.
	ErrTooLarge = transport.ErrTooLarge
	// ErrNoRoom means a transport has no room for another peer (rdma: the
	// device's completion queues are full). Under the auto policy the peer
	// gets the next transport instead (a fallback, reason "full"); a Dial
	// under a policy that names the transport fails with it.
	ErrNoRoom = transport.ErrNoRoom
	// ErrNotRegistered means a local buffer is not in registered memory.
	ErrNotRegistered = transport.ErrNotRegistered
	// ErrAuth means the handshake's authentication failed.
	ErrAuth = handshake.ErrAuth
	// ErrUnknownNode means the directory has no live entry for a node ID:
	// it never registered, deregistered, or its entry expired.
	ErrUnknownNode = errors.New("unknown node")
	// ErrNoDirectory means a node ID was to be resolved by an engine
	// without a directory (Config.Directory is p2p).
	ErrNoDirectory = errors.New("no directory: set directory (http://HOST:PORT or etcd://HOST:2379/PREFIX) to use node IDs")
	// ErrDirectoryUnavailable means the directory could not be reached.
	ErrDirectoryUnavailable = errors.New("directory unreachable")
	// ErrNoTransport means the two sides have no usable transport in common
	// under their policies.
	ErrNoTransport = handshake.ErrNoTransport
	// ErrVersion means the two sides speak no common protocol version.
	ErrVersion = handshake.ErrVersion
	// ErrPoolExhausted means the pool has no block large enough.
	ErrPoolExhausted = mem.ErrPoolExhausted
	// ErrCUDANotAvailable means GPU memory was asked for where there is no
	// CUDA: no driver (libcuda.so.1), no GPU, a driver too old, or a
	// build without cgo. The error says which, and how to fix it.
	ErrCUDANotAvailable = mem.ErrCUDANotAvailable
	// ErrPeerLost means the connection to a peer failed. It also matches
	// ErrClosed.
	ErrPeerLost = transport.ErrPeerLost
	// ErrPathFailed means a message or a write-with-notify was in flight
	// when its connection's rdma path failed and the connection carried
	// on over its control connection (a failover inside the connection):
	// the peer may or may not have had it. READs and WRITEs in flight are
	// repeated instead, and never fail with it.
	ErrPathFailed = transport.ErrPathFailed
	// ErrStalled means a peer made no progress for Config.OpTimeout while
	// operations were outstanding with it, and the engine closed its
	// connection; the error is a *StallError, which also matches
	// os.ErrDeadlineExceeded and ErrPeerLost.
	ErrStalled = watchdog.ErrStalled
	// ErrTransient means a connection setup failed in a way a fresh attempt
	// may not (the peer's rdma_cm refused or dropped it). Dial has already
	// tried again (Engine.SetupRetries); an error that still matches it
	// came from the last attempt.
	ErrTransient = transport.ErrTransient
)

// ReconnectError is the error of an operation on a dialed peer whose
// connection failed and whose address then refused or reset every
// connection for Config.ReconnectWait: the peer is down (its process died,
// or has not come back yet). It matches ErrPeerLost (and so ErrClosed),
// and Err, the last dial's error (syscall.ECONNREFUSED, ...), through
// Unwrap.
type ReconnectError struct {
	Peer     string        // the peer's address
	Tried    time.Duration // how long it was dialed again
	Attempts int           // how many dials failed
	Wait     time.Duration // Config.ReconnectWait
	Err      error         // the last dial's error
}

func (e *ReconnectError) Error() string {
	return fmt.Sprintf("peer %s is down: it %s every connection for %v (%d attempts; reconnect_wait %v): %v",
		e.Peer, refusal(e.Err), e.Tried.Round(time.Millisecond), e.Attempts, e.Wait, e.Err)
}

// Is matches ErrPeerLost.
func (e *ReconnectError) Is(target error) bool { return target == ErrPeerLost }

// Unwrap returns the last dial's error.
func (e *ReconnectError) Unwrap() error { return e.Err }

// refusal words how a dial failed, for a *ReconnectError.
func refusal(err error) string {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused"
	}
	return "reset"
}

// StallError is the error of an operation whose peer made no progress for
// Config.OpTimeout while operations were outstanding with it: the engine
// closed the peer's connection so that every one of them ended. It matches
// ErrStalled and os.ErrDeadlineExceeded (a timeout), and, as any operation
// on a lost connection, ErrPeerLost and ErrClosed through Cause.
type StallError struct {
	Op      string        // the operation: "write", "read", "write_imm", "send"
	Peer    string        // the peer's address, or its engine ID
	Timeout time.Duration // Config.OpTimeout
	Pending int           // the operations outstanding when it was declared stalled
	Cause   error         // how the operation itself failed when the connection closed
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s to %s: the peer made no progress for %v (op_timeout) with %d operations outstanding, so its connection was closed: %v",
		e.Op, e.Peer, e.Timeout, e.Pending, e.Cause)
}

// Is matches ErrStalled and os.ErrDeadlineExceeded.
func (e *StallError) Is(target error) bool {
	return target == ErrStalled || target == os.ErrDeadlineExceeded
}

// Unwrap returns the operation's own error.
func (e *StallError) Unwrap() error { return e.Cause }

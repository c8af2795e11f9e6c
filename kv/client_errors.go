package kv

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the client's methods; match them with errors.Is. The messages
// of the server's errors are kept.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrFull: the server's pool has no room for the value.
	ErrFull = errors.New("server pool full")
	// ErrInvalid: the request was refused (empty or oversized key or value,
	// a buffer outside the client's registered memory, options out of
	// range).
	ErrInvalid = errors.New("invalid request")
	// ErrInvalidKey: the key was refused (empty, or longer than the
	// server's limit). It matches ErrInvalid too.
	ErrInvalidKey error = invalidKey{}
	// ErrHasLease: a DELETE was refused because a read lease holds the
	// value (a *LeaseError says for how long).
	ErrHasLease = errors.New("object has a read lease")
	// ErrUnavailable: the server could not be reached in time.
	ErrUnavailable = errors.New("server unavailable")
	// ErrMoved: a server of a cluster refused a write because it does not
	// own the key now (the placement is changing, or it is rejoining, or
	// it lost touch with the directory). A Cluster looks again and retries
	// by itself, for ClusterOptions.PlacementWait.
	ErrMoved = errors.New("key not writable on this server now")
)

type invalidKey struct{}

func (invalidKey) Error() string        { return "invalid key" }
func (invalidKey) Is(target error) bool { return target == ErrInvalid }

// LeaseError is a DELETE's error when a GET's read lease holds the value
// (ServerOptions.LeaseTTL): the value stays until the lease ends, or a
// DELETE with DeleteOptions.Force removes it anyway. It matches
// ErrHasLease.
type LeaseError struct {
	msg string
	// Left is how long the lease had left when the server refused.
	Left time.Duration
}

func (e *LeaseError) Error() string { return "kv: " + e.msg }

func (e *LeaseError) Unwrap() error { return ErrHasLease }

// unavailableError is gRPC's Unavailable status: the server could not be
// reached, msg says why.
type unavailableError struct{ target, msg string }

func (e *unavailableError) Error() string {
	return fmt.Sprintf("kv: %s: %s: %v", e.target, e.msg, ErrUnavailable)
}

func (e *unavailableError) Unwrap() error { return ErrUnavailable }

// serverError is a refusal by the server: its message, matching kind.
type serverError struct {
	msg  string
	kind error
}

func (e *serverError) Error() string { return "kv: " + e.msg }

func (e *serverError) Unwrap() error { return e.kind }

// BufferTooSmallError is returned by GetInto when the value does not fit the
// buffer, and by Get when it does not fit the client's whole buffer pool
// (Pool set). Needed is the value's size.
type BufferTooSmallError struct {
	Needed, Have uint64
	// Pool: Have is the capacity of the client's buffer pool
	// (EngineConfig.MemoryMB), which the value exceeds.
	Pool bool
}

func (e *BufferTooSmallError) Error() string {
	if e.Pool {
		return fmt.Sprintf("kv: value is %d bytes, larger than the client's buffer pool of %d bytes: give the client a pool of at least %d MiB (EngineConfig.MemoryMB)",
			e.Needed, e.Have, e.Needed>>20+1)
	}
	return fmt.Sprintf("value is %d bytes and the buffer holds %d: a buffer of at least %d bytes is needed", e.Needed, e.Have, e.Needed)
}

// DialError is Dial's error when the server could not be reached: nothing
// listens at the address, the name does not resolve, what answers is not a
// KV server, or its data plane cannot be connected. It matches
// ErrUnavailable, the cause (for example syscall.ECONNREFUSED) and, when
// Dial gave up waiting, the context's error.
type DialError struct {
	// Addr is the server address as given to Dial.
	Addr string
	// Waited is how long Dial tried; zero when it failed at once.
	Waited time.Duration
	// Attempts is how many times Dial tried to reach the server.
	Attempts int
	// Cause is the last reason the server could not be reached.
	Cause error
	// Ctx is the context's error when Dial gave up waiting, or nil.
	Ctx error
}

func (e *DialError) Error() string {
	if e.Waited > 0 {
		return fmt.Sprintf("kv: no KV server at %s within %v (%d attempts): %v", e.Addr, e.Waited.Round(time.Millisecond), e.Attempts, e.Cause)
	}
	return fmt.Sprintf("kv: no KV server at %s: %v", e.Addr, e.Cause)
}

func (e *DialError) Unwrap() []error {
	errs := []error{ErrUnavailable, e.Cause}
	if e.Ctx != nil {
		errs = append(errs, e.Ctx)
	}
	return errs
}

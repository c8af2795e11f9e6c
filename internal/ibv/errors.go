package ibv

import (
	"errors"
	"fmt"
	"net"

	"github.com/xferio/xfer/internal/sys"
)

// ErrNotSupported means verbs cannot be used here: the binary was built
// without cgo, the host has no libibverbs.so.1, or it has no RDMA device.
// The wrapping error says which and how to fix it. It is the module's one
// not-supported sentinel, [sys.ErrNotSupported], so that errors.Is matches
// it against the ErrNotSupported of every layer above.
var ErrNotSupported = sys.ErrNotSupported

// ErrNoDevice means the host has no RDMA device, or none with the requested
// name. It matches [ErrNotSupported] as well.
var ErrNoDevice error = &sentinel{msg: "no RDMA device", parent: ErrNotSupported}

// ErrClosed is returned by calls on a handle after its Close. It matches
// net.ErrClosed as well.
var ErrClosed error = &sentinel{msg: "ibv: handle is closed", parent: net.ErrClosed}

// Sentinels that a [WCError] matches, by completion status.
var (
	// ErrRemoteAccess: the responder refused the access (IBV_WC_REM_ACCESS_ERR):
	// a wrong rkey, an address outside the MR, or missing access rights.
	ErrRemoteAccess = errors.New("remote access error")
	// ErrFlushed: the work request was flushed because the QP is in the
	// error state (IBV_WC_WR_FLUSH_ERR).
	ErrFlushed = errors.New("work request flushed")
	// ErrRetryExceeded: the peer did not answer within the transport or RNR
	// retry budget (IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR).
	ErrRetryExceeded = errors.New("retry exceeded")
)

// sentinel is an error value that also matches a more general one.
type sentinel struct {
	msg    string
	parent error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.parent }

// LibraryError reports that a shared library could not be loaded or lacks a
// symbol. It wraps [ErrNotSupported].
type LibraryError struct {
	Library string // "libibverbs.so.1"
	Detail  string // what dlopen or dlvsym said
	Fix     string // how to install it
}

func (e *LibraryError) Error() string {
	return fmt.Sprintf("load %s: %s; %s", e.Library, e.Detail, e.Fix)
}

func (e *LibraryError) Unwrap() error { return ErrNotSupported }

// fixVerbs says how to install the library the package loads.
const fixVerbs = "install rdma-core: `apt-get install rdma-core ibverbs-providers libibverbs1` " +
	"(Debian, Ubuntu) or `dnf install rdma-core libibverbs` (Fedora, RHEL)"

package metrics

import "github.com/xferio/xfer/transport"

// Op is an operation as the metrics name it (the op label).
type Op uint8

// The operations the metrics name.
const (
	Send Op = iota
	Recv
	Write
	Read
	WriteImm
	NumOps
)

var opNames = [NumOps]string{"send", "recv", "write", "read", "write_imm"}

// String returns the op label.
func (o Op) String() string { return opNames[o] }

// OpOf returns the Op of an operation of kind k (a send for any kind
// that is not a one-sided one).
func OpOf(k transport.OpKind) Op {
	switch k {
	case transport.OpWrite:
		return Write
	case transport.OpRead:
		return Read
	case transport.OpWriteImm:
		return WriteImm
	}
	return Send
}

// Fallback, retry and failover reasons, the reason label of
// xfer_fallbacks_total, xfer_setup_retries_total and
// xfer_failovers_total: a bounded set, unlike the error text, which the
// status API and the log carry.
const (
	// ReasonUnusable: the transport was offered but cannot reach this
	// peer (another host for shm, different link layers for rdma).
	ReasonUnusable = "unusable"
	// ReasonSetupFailed: the transport was chosen but its connection could
	// not be set up, and the dialer tried the next one.
	ReasonSetupFailed = "setup_failed"
	// ReasonReconnected: a peer reconnected on a lesser transport than it
	// had (its rdma device went away, say).
	ReasonReconnected = "reconnected_lesser"
	// ReasonUnavailable: the configuration names the transport's device
	// (rdma.device), and the transport cannot open it, so the auto policy
	// goes without it from the start.
	ReasonUnavailable = "unavailable"
	// ReasonFull: the transport has no room for another peer (rdma: the
	// device's completion queues are full), so the peer got the next one.
	ReasonFull = "full"
	// ReasonConnLost: an operation's connection was lost, and the
	// operation was repeated on a new one (xfer_failovers_total).
	ReasonConnLost = "connection_lost"
	// ReasonPathFailed: a connection's own data path (rdma's queue pairs)
	// failed, and the connection carries on over its control connection.
	ReasonPathFailed = "path_failed"
	// ReasonRecovered: a peer's paused transport answered a probe, and the
	// peer moved back to it (xfer_failovers_total).
	ReasonRecovered = "recovered"
	// ReasonTransient: a setup failed transiently and was tried again
	// (xfer_setup_retries_total).
	ReasonTransient = "transient"
)

// fallbackReasons are the reasons whose xfer_fallbacks_total series exist
// from the start.
var fallbackReasons = []string{ReasonUnusable, ReasonSetupFailed, ReasonReconnected, ReasonUnavailable, ReasonFull}

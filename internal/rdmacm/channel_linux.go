package rdmacm

import (
	"sync"

	"github.com/xferio/xfer/internal/sys"
)

// Channel is a channel to the kernel's RDMA connection manager through
// its character device, /dev/infiniband/rdma_cm, without librdmacm: the
// IDs created on it report their events there.
//
// It does what librdmacm's rdma_cm does for RC connections, with one
// difference that matters: librdmacm opens a verbs context of its own on
// every device one of its IDs is bound to, and closes it only when it finds
// the device gone from a later device list. That never happens when the
// device was the last one (librdmacm's device list refresh fails on an
// empty list), and on devices without disassociate_ucontext (rxe, siw) the
// kernel's unregistration of the device (`rdma link delete`) waits until
// every context is closed: the process would hold the device until it
// exits. A Channel holds no verbs context: the QPs it connects are the
// caller's, made on the caller's own [ibv.Context] and [ibv.PD].
//
// The QPs are brought through INIT, RTR and RTS with the attributes the
// kernel's rdma_cm computes (RDMA_USER_CM_CMD_INIT_QP_ATTR), as librdmacm
// does; on iWARP the connection itself takes them to RTS.
type Channel struct {
	fd int
	w  *sys.FDWaiter

	mu  sync.Mutex
	ids map[uint32]*ID
}

// ID is an ID of a [Channel]: a listener, or one end of a connection.
type ID struct {
	ch     *Channel
	handle uint32
	open   bool
	rd     int // responder resources and initiator depth for Accept
	// retry and rnrRetry are the QP's retry counts the connection asks
	// for (SetRetry); zero means 7.
	retry, rnrRetry int
}

// SetRetry sets the retry counts Connect and Accept ask for: how many
// times the QP retransmits before it fails a request (retry, 0 to 7) and
// how many times it retries after a receiver-not-ready NAK (rnrRetry, 0 to
// 7, where 7 means without end). Negative values are 0; without SetRetry
// both are 7.
func (id *ID) SetRetry(retry, rnrRetry int) {
	id.retry, id.rnrRetry = retryCount(retry), retryCount(rnrRetry)
}

// retryCount is a retry count as SetRetry takes it, as the CM carries it:
// 0 to 7, and -1 (stored for "none") becomes 0 there.
func retryCount(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 7:
		return 7
	}
	return n
}

// wireRetry is a stored retry count as the CM's conn_param carries it.
func wireRetry(n int) uint8 {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return 7
	}
	return uint8(n)
}

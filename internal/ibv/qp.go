package ibv

import (
	"fmt"
	"strconv"
)

// QPType is the transport service of a QP.
type QPType int

// QP types. The zero value is RC.
const (
	QPTypeRC QPType = iota // reliable connected (IBV_QPT_RC)
	QPTypeUC               // unreliable connected (IBV_QPT_UC)
	QPTypeUD               // unreliable datagram (IBV_QPT_UD); no address handles yet
)

// QPInitAttr are the arguments of [PD.CreateQP] and [CMID.CreateQP]. Zero
// values take the documented defaults.
type QPInitAttr struct {
	SendCQ *CQ // required
	RecvCQ *CQ // default: SendCQ
	SRQ    *SRQ

	MaxSendWR  int // default 128
	MaxRecvWR  int // default 128; ignored with an SRQ
	MaxSendSGE int // default 1
	MaxRecvSGE int // default 1
	MaxInline  int // default 0: no inline data
	Type       QPType
	SigAll     bool // every send WR completes signaled, whatever its flags
}

// String summarizes the sizes, for error messages.
func (a QPInitAttr) String() string {
	return fmt.Sprintf("%s send_wr %d recv_wr %d sge %d/%d inline %d",
		[]string{"RC", "UC", "UD"}[min(max(int(a.Type), 0), 2)], a.MaxSendWR, a.MaxRecvWR, a.MaxSendSGE, a.MaxRecvSGE, a.MaxInline)
}

// QPCaps are the capacities a QP was granted: at least what was asked for.
type QPCaps struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
}

// QPState is the state of a QP (enum ibv_qp_state).
type QPState int

// QP states. The values are those of enum ibv_qp_state.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
	QPSUnknown
)

func (s QPState) String() string {
	switch s {
	case QPSReset:
		return "RESET"
	case QPSInit:
		return "INIT"
	case QPSRTR:
		return "RTR"
	case QPSRTS:
		return "RTS"
	case QPSSQD:
		return "SQD"
	case QPSSQE:
		return "SQE"
	case QPSErr:
		return "ERR"
	case QPSUnknown:
		return "UNKNOWN"
	}
	return "state " + strconv.Itoa(int(s))
}

// RTRAttr are the arguments of [QP.ToRTR]: where the remote QP is and how to
// reach it. Zero values of the optional fields take the documented defaults;
// where zero is a meaningful setting, -1 asks for it.
type RTRAttr struct {
	RemoteQPN uint32
	RemotePSN uint32
	PathMTU   int // bytes: 256..4096; default: the active MTU of Port
	DLID      uint16
	IsGlobal  bool     // use a GRH: required on RoCE
	DGID      [16]byte // with IsGlobal: the remote GID
	SGIDIndex int      // with IsGlobal: the local GID index
	HopLimit  uint8    // with IsGlobal; default 64
	Port      int      // default 1
	// MaxDestRdAtomic is how many RDMA READs and atomics the remote side may
	// have outstanding against this QP; default 16, capped at the device's
	// max_qp_rd_atom.
	MaxDestRdAtomic int
	// MinRNRTimer is the IB-encoded RNR NAK timer; default 12 (0.64 ms).
	MinRNRTimer int
}

// RTSAttr are the arguments of [QP.ToRTS]. Zero values take the documented
// defaults; -1 asks for a literal zero.
type RTSAttr struct {
	PSN uint32
	// Timeout is the IB-encoded local ACK timeout, 4.096 µs * 2^Timeout;
	// default 14 (67 ms). -1 means 0: wait forever.
	Timeout  int
	RetryCnt int // transport retries; default 7
	RNRRetry int // RNR retries; default 7 (infinite)
	// MaxRdAtomic is how many RDMA READs and atomics this QP may have
	// outstanding; default 16, capped at the device's max_qp_init_rd_atom.
	MaxRdAtomic int
}

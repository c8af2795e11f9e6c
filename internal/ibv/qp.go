package ibv

import (
	"fmt"
	"strconv"
)

// Access is a set of memory and QP access rights (enum ibv_access_flags).
type Access int

// Access rights. The values are those of IBV_ACCESS_*.
const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessMWBind lets memory windows be bound over an MR.
	AccessMWBind Access = 1 << 4
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

// Opcode is the operation of a send work request (enum ibv_wr_opcode).
type Opcode int

// Send opcodes. The values are those of enum ibv_wr_opcode.
const (
	OpWrite    Opcode = 0 // RDMA WRITE
	OpWriteImm Opcode = 1 // RDMA WRITE with immediate: consumes a receive at the peer
	OpSend     Opcode = 2
	OpSendImm  Opcode = 3
	OpRead     Opcode = 4 // RDMA READ
)

func (o Opcode) String() string {
	switch o {
	case OpWrite:
		return "RDMA_WRITE"
	case OpWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpSend:
		return "SEND"
	case OpSendImm:
		return "SEND_WITH_IMM"
	case OpRead:
		return "RDMA_READ"
	}
	return "opcode " + strconv.Itoa(int(o))
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags int

// Send flags. The values are those of IBV_SEND_*.
const (
	FlagFence     SendFlags = 1 << 0 // wait for earlier RDMA READs and atomics
	FlagSignaled  SendFlags = 1 << 1 // generate a completion
	FlagSolicited SendFlags = 1 << 2 // wake a peer waiting for solicited events
	FlagInline    SendFlags = 1 << 3 // copy the data at post time; Len <= QPCaps.MaxInline
)

// SGE is a scatter/gather element: Len bytes at Addr in the MR with LKey. A
// zero Len makes a work request without data.
type SGE struct {
	Addr uint64
	Len  uint32
	LKey uint32
}

// SendWR is a send work request. RemoteAddr and RKey are for RDMA WRITE and
// READ; Imm is for the *Imm opcodes and is sent in network order.
type SendWR struct {
	ID         uint64
	Op         Opcode
	Flags      SendFlags
	SGE        SGE
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGE SGE
}

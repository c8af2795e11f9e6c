package ibv

import (
	"fmt"
	"strconv"
)

// PostError reports a batch of work requests that the provider refused in
// part or whole. The WRs before Bad were posted and will complete; the
// others were not.
type PostError struct {
	Op     string // "ibv_post_send", "ibv_post_recv" or "ibv_post_srq_recv"
	Object string // "QP 0x11 on rxe0", "SRQ on rxe0"
	N      int    // WRs in the batch
	Posted int    // WRs posted
	Bad    int    // index of the refused WR (-1 if the provider did not say)
	BadID  uint64 // its ID
	Err    error  // the errno
}

func (e *PostError) Error() string {
	if e.Bad < 0 {
		return fmt.Sprintf("%s on %s: %d of %d WRs posted: %v", e.Op, e.Object, e.Posted, e.N, e.Err)
	}
	return fmt.Sprintf("%s on %s: WR %d (id %#x) of %d refused, %d posted: %v",
		e.Op, e.Object, e.Bad, e.BadID, e.N, e.Posted, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

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

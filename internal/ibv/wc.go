package ibv

import (
	"fmt"
	"strconv"
)

// WC is a work completion, as [CQ.Poll] returns it.
type WC struct {
	ID        uint64 // the ID of the work request
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32 // received bytes, for receive completions
	Imm       uint32 // immediate data in host order, when HasImm
	HasImm    bool
	QPNum     uint32 // the local QP the work request belonged to
	SrcQP     uint32
}

// Err returns nil for a successful completion and a [WCError] otherwise.
func (w *WC) Err() error {
	if w.Status == WCSuccess {
		return nil
	}
	return WCError{Status: w.Status, VendorErr: w.VendorErr, Opcode: w.Opcode, ID: w.ID, QPNum: w.QPNum}
}

// WCStatus is the status of a completion (enum ibv_wc_status).
type WCStatus int

// Completion statuses. The values are those of enum ibv_wc_status.
const (
	WCSuccess          WCStatus = 0
	WCLocLenErr        WCStatus = 1
	WCLocQPOpErr       WCStatus = 2
	WCLocEECOpErr      WCStatus = 3
	WCLocProtErr       WCStatus = 4
	WCWRFlushErr       WCStatus = 5
	WCMWBindErr        WCStatus = 6
	WCBadRespErr       WCStatus = 7
	WCLocAccessErr     WCStatus = 8
	WCRemInvReqErr     WCStatus = 9
	WCRemAccessErr     WCStatus = 10
	WCRemOpErr         WCStatus = 11
	WCRetryExcErr      WCStatus = 12
	WCRNRRetryExcErr   WCStatus = 13
	WCLocRDDViolErr    WCStatus = 14
	WCRemInvRdReqErr   WCStatus = 15
	WCRemAbortErr      WCStatus = 16
	WCInvEECNErr       WCStatus = 17
	WCInvEECStateErr   WCStatus = 18
	WCFatalErr         WCStatus = 19
	WCRespTimeoutErr   WCStatus = 20
	WCGeneralErr       WCStatus = 21
	WCTMErr            WCStatus = 22
	WCTMRndvIncomplete WCStatus = 23
	numWCStatus                 = 24
)

var wcStatusNames = [numWCStatus]string{
	WCSuccess:          "success",
	WCLocLenErr:        "local length error",
	WCLocQPOpErr:       "local QP operation error",
	WCLocEECOpErr:      "local EE context operation error",
	WCLocProtErr:       "local protection error",
	WCWRFlushErr:       "work request flushed",
	WCMWBindErr:        "memory window bind error",
	WCBadRespErr:       "bad response error",
	WCLocAccessErr:     "local access error",
	WCRemInvReqErr:     "remote invalid request error",
	WCRemAccessErr:     "remote access error",
	WCRemOpErr:         "remote operation error",
	WCRetryExcErr:      "retry exceeded",
	WCRNRRetryExcErr:   "RNR retry exceeded",
	WCLocRDDViolErr:    "local RDD violation error",
	WCRemInvRdReqErr:   "remote invalid RD request",
	WCRemAbortErr:      "remote aborted error",
	WCInvEECNErr:       "invalid EE context number",
	WCInvEECStateErr:   "invalid EE context state",
	WCFatalErr:         "fatal error",
	WCRespTimeoutErr:   "response timeout error",
	WCGeneralErr:       "general error",
	WCTMErr:            "tag matching error",
	WCTMRndvIncomplete: "tag matching rendezvous incomplete",
}

// String describes the status as ibv_wc_status_str does, in lower case.
func (s WCStatus) String() string {
	if s >= 0 && s < numWCStatus {
		return wcStatusNames[s]
	}
	return "unknown completion status " + strconv.Itoa(int(s))
}

// WCOpcode is the kind of work request a completion is for (enum ibv_wc_opcode).
type WCOpcode int

// Completion opcodes. The values are those of enum ibv_wc_opcode.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "opcode " + strconv.Itoa(int(o))
}

// WCError is a failed completion. It matches [ErrRemoteAccess],
// [ErrFlushed] or [ErrRetryExceeded] by status. Both
// errors.As(err, &v) with v a WCError and with v a *WCError work.
type WCError struct {
	Status    WCStatus
	VendorErr uint32
	Opcode    WCOpcode // may be meaningless for failed completions on some providers
	ID        uint64   // the work request ID
	QPNum     uint32
}

func (e WCError) Error() string {
	return fmt.Sprintf("work completion %#x on QP %#x: %s (vendor error %#x)", e.ID, e.QPNum, e.Status, e.VendorErr)
}

// Is matches the sentinel of the status.
func (e WCError) Is(target error) bool {
	switch target {
	case ErrRemoteAccess:
		return e.Status == WCRemAccessErr
	case ErrFlushed:
		return e.Status == WCWRFlushErr
	case ErrRetryExceeded:
		return e.Status == WCRetryExcErr || e.Status == WCRNRRetryExcErr
	}
	return false
}

// As lets errors.As fill a *WCError target as well as a WCError one.
func (e WCError) As(target any) bool {
	switch t := target.(type) {
	case *WCError:
		*t = e
		return true
	case **WCError:
		c := e
		*t = &c
		return true
	}
	return false
}

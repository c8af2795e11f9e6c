//go:build cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/xferio/xfer/internal/cabi"
)

// abiTable returns abi_table.h evaluated against the package's header.
func abiTable() []cabi.Item {
	var n C.int
	p := C.xibv_abi_table(&n)
	return cabi.Table(unsafe.Slice(p, int(n)), func(it C.struct_xibv_abi_item) (string, int64) {
		return C.GoString(it.expr), int64(it.value)
	})
}

// abiGoConsts lists the Go constants whose values are the verbs ones, and
// the layouts of the Go structs that cross into C, against ibv_abi.h and
// shim.h. TestABI checks that each pair is equal.
func abiGoConsts() []cabi.Const {
	c := cabi.Equal
	m := cabi.Layout
	var (
		swr  SendWR
		cswr C.struct_xfer_send_wr
		rwr  RecvWR
		crwr C.struct_xfer_recv_wr
		wc   WC
		cwc  C.struct_xfer_wc
	)
	return []cabi.Const{
		c("AccessLocalWrite", int64(AccessLocalWrite), C.IBV_ACCESS_LOCAL_WRITE),
		c("AccessRemoteWrite", int64(AccessRemoteWrite), C.IBV_ACCESS_REMOTE_WRITE),
		c("AccessRemoteRead", int64(AccessRemoteRead), C.IBV_ACCESS_REMOTE_READ),
		c("AccessRemoteAtomic", int64(AccessRemoteAtomic), C.IBV_ACCESS_REMOTE_ATOMIC),
		c("OpWrite", int64(OpWrite), C.IBV_WR_RDMA_WRITE),
		c("OpWriteImm", int64(OpWriteImm), C.IBV_WR_RDMA_WRITE_WITH_IMM),
		c("OpSend", int64(OpSend), C.IBV_WR_SEND),
		c("OpSendImm", int64(OpSendImm), C.IBV_WR_SEND_WITH_IMM),
		c("OpRead", int64(OpRead), C.IBV_WR_RDMA_READ),
		c("FlagFence", int64(FlagFence), C.IBV_SEND_FENCE),
		c("FlagSignaled", int64(FlagSignaled), C.IBV_SEND_SIGNALED),
		c("FlagSolicited", int64(FlagSolicited), C.IBV_SEND_SOLICITED),
		c("FlagInline", int64(FlagInline), C.IBV_SEND_INLINE),
		c("QPSReset", int64(QPSReset), C.IBV_QPS_RESET),
		c("QPSInit", int64(QPSInit), C.IBV_QPS_INIT),
		c("QPSRTR", int64(QPSRTR), C.IBV_QPS_RTR),
		c("QPSRTS", int64(QPSRTS), C.IBV_QPS_RTS),
		c("QPSSQD", int64(QPSSQD), C.IBV_QPS_SQD),
		c("QPSSQE", int64(QPSSQE), C.IBV_QPS_SQE),
		c("QPSErr", int64(QPSErr), C.IBV_QPS_ERR),
		c("QPSUnknown", int64(QPSUnknown), C.IBV_QPS_UNKNOWN),
		c("WCSuccess", int64(WCSuccess), C.IBV_WC_SUCCESS),
		c("WCLocLenErr", int64(WCLocLenErr), C.IBV_WC_LOC_LEN_ERR),
		c("WCLocProtErr", int64(WCLocProtErr), C.IBV_WC_LOC_PROT_ERR),
		c("WCWRFlushErr", int64(WCWRFlushErr), C.IBV_WC_WR_FLUSH_ERR),
		c("WCLocAccessErr", int64(WCLocAccessErr), C.IBV_WC_LOC_ACCESS_ERR),
		c("WCRemInvReqErr", int64(WCRemInvReqErr), C.IBV_WC_REM_INV_REQ_ERR),
		c("WCRemAccessErr", int64(WCRemAccessErr), C.IBV_WC_REM_ACCESS_ERR),
		c("WCRemOpErr", int64(WCRemOpErr), C.IBV_WC_REM_OP_ERR),
		c("WCRetryExcErr", int64(WCRetryExcErr), C.IBV_WC_RETRY_EXC_ERR),
		c("WCRNRRetryExcErr", int64(WCRNRRetryExcErr), C.IBV_WC_RNR_RETRY_EXC_ERR),
		c("WCRespTimeoutErr", int64(WCRespTimeoutErr), C.IBV_WC_RESP_TIMEOUT_ERR),
		c("WCGeneralErr", int64(WCGeneralErr), C.IBV_WC_GENERAL_ERR),
		c("WCTMRndvIncomplete", int64(WCTMRndvIncomplete), C.IBV_WC_TM_RNDV_INCOMPLETE),
		c("WCSend", int64(WCSend), C.IBV_WC_SEND),
		c("WCRDMAWrite", int64(WCRDMAWrite), C.IBV_WC_RDMA_WRITE),
		c("WCRDMARead", int64(WCRDMARead), C.IBV_WC_RDMA_READ),
		c("WCCompSwap", int64(WCCompSwap), C.IBV_WC_COMP_SWAP),
		c("WCFetchAdd", int64(WCFetchAdd), C.IBV_WC_FETCH_ADD),
		c("WCBindMW", int64(WCBindMW), C.IBV_WC_BIND_MW),
		c("WCLocalInv", int64(WCLocalInv), C.IBV_WC_LOCAL_INV),
		c("WCRecv", int64(WCRecv), C.IBV_WC_RECV),
		c("WCRecvRDMAWithImm", int64(WCRecvRDMAWithImm), C.IBV_WC_RECV_RDMA_WITH_IMM),

		m("sizeof SendWR", unsafe.Sizeof(swr), unsafe.Sizeof(cswr)),
		m("SendWR.ID", unsafe.Offsetof(swr.ID), unsafe.Offsetof(cswr.id)),
		m("SendWR.Op", unsafe.Offsetof(swr.Op), unsafe.Offsetof(cswr.op)),
		m("sizeof SendWR.Op", unsafe.Sizeof(swr.Op), unsafe.Sizeof(cswr.op)),
		m("SendWR.Flags", unsafe.Offsetof(swr.Flags), unsafe.Offsetof(cswr.flags)),
		m("sizeof SendWR.Flags", unsafe.Sizeof(swr.Flags), unsafe.Sizeof(cswr.flags)),
		m("SendWR.SGE", unsafe.Offsetof(swr.SGE), unsafe.Offsetof(cswr.sge)),
		m("SGE.Addr", unsafe.Offsetof(swr.SGE.Addr), unsafe.Offsetof(cswr.sge.addr)),
		m("SGE.Len", unsafe.Offsetof(swr.SGE.Len), unsafe.Offsetof(cswr.sge.len)),
		m("SGE.LKey", unsafe.Offsetof(swr.SGE.LKey), unsafe.Offsetof(cswr.sge.lkey)),
		m("SendWR.RemoteAddr", unsafe.Offsetof(swr.RemoteAddr), unsafe.Offsetof(cswr.remote_addr)),
		m("SendWR.RKey", unsafe.Offsetof(swr.RKey), unsafe.Offsetof(cswr.rkey)),
		m("SendWR.Imm", unsafe.Offsetof(swr.Imm), unsafe.Offsetof(cswr.imm)),
		m("sizeof RecvWR", unsafe.Sizeof(rwr), unsafe.Sizeof(crwr)),
		m("RecvWR.ID", unsafe.Offsetof(rwr.ID), unsafe.Offsetof(crwr.id)),
		m("RecvWR.SGE", unsafe.Offsetof(rwr.SGE), unsafe.Offsetof(crwr.sge)),
		m("sizeof WC", unsafe.Sizeof(wc), unsafe.Sizeof(cwc)),
		m("WC.ID", unsafe.Offsetof(wc.ID), unsafe.Offsetof(cwc.id)),
		m("WC.Status", unsafe.Offsetof(wc.Status), unsafe.Offsetof(cwc.status)),
		m("sizeof WC.Status", unsafe.Sizeof(wc.Status), unsafe.Sizeof(cwc.status)),
		m("WC.Opcode", unsafe.Offsetof(wc.Opcode), unsafe.Offsetof(cwc.opcode)),
		m("sizeof WC.Opcode", unsafe.Sizeof(wc.Opcode), unsafe.Sizeof(cwc.opcode)),
		m("WC.VendorErr", unsafe.Offsetof(wc.VendorErr), unsafe.Offsetof(cwc.vendor_err)),
		m("WC.ByteLen", unsafe.Offsetof(wc.ByteLen), unsafe.Offsetof(cwc.byte_len)),
		m("WC.Imm", unsafe.Offsetof(wc.Imm), unsafe.Offsetof(cwc.imm)),
		m("WC.HasImm", unsafe.Offsetof(wc.HasImm), unsafe.Offsetof(cwc.has_imm)),
		m("sizeof WC.HasImm", unsafe.Sizeof(wc.HasImm), unsafe.Sizeof(cwc.has_imm)),
		m("WC.QPNum", unsafe.Offsetof(wc.QPNum), unsafe.Offsetof(cwc.qp_num)),
		m("WC.SrcQP", unsafe.Offsetof(wc.SrcQP), unsafe.Offsetof(cwc.src_qp)),
	}
}

// The Go structs that C reads and writes must match their C mirrors; these
// fail to compile on a platform where they do not.
var (
	_ [unsafe.Sizeof(SendWR{}) - C.sizeof_struct_xfer_send_wr]struct{}
	_ [C.sizeof_struct_xfer_send_wr - unsafe.Sizeof(SendWR{})]struct{}
	_ [unsafe.Sizeof(RecvWR{}) - C.sizeof_struct_xfer_recv_wr]struct{}
	_ [C.sizeof_struct_xfer_recv_wr - unsafe.Sizeof(RecvWR{})]struct{}
	_ [unsafe.Sizeof(WC{}) - C.sizeof_struct_xfer_wc]struct{}
	_ [C.sizeof_struct_xfer_wc - unsafe.Sizeof(WC{})]struct{}
)

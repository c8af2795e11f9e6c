// Package ibv is xfer's binding to RDMA verbs (libibverbs). With
// internal/cuda (the CUDA driver) and cmd/libxfer (the C ABI), it is one of
// the three packages in the module that import "C".
//
// # Loading
//
// Nothing is linked at build time: [Load] opens libibverbs.so.1 with dlopen
// and binds the versioned symbols it needs (ibv_*@IBVERBS_1.1) with dlvsym. A
// binary that uses the package therefore starts on any Linux host, and on
// one without rdma-core every call returns an error that wraps
// [ErrNotSupported] and says what to install. The verbs ABI structs and
// constants the package needs are declared in ibv_abi.h, so building needs
// no -dev packages; TestABI checks them against the system headers when
// those are installed.
//
// Built without cgo (CGO_ENABLED=0) or for another OS, the package keeps the
// same API, and every call returns an error wrapping [ErrNotSupported].
//
// # Connections through rdma_cm
//
// iWARP QPs, and RoCE or InfiniBand QPs when the caller wants it, are
// connected through the kernel's rdma_cm by internal/rdmacm, which is
// plain Go. The few verbs calls it needs are exported here:
// [QP.ModifyFromCM], [QP.Context], [QP.HasSRQ], [Context.PortIsInfiniBand]
// and [Context.KernelIndex].
//
// # Data path
//
// [QP.PostSend], [QP.PostRecv], [SRQ.PostRecv], [CQ.Poll] and [CQ.ReqNotify]
// call the provider's entry points in ibv_context.ops, as the static inline
// functions of <infiniband/verbs.h> do. A batch of work requests crosses the
// cgo boundary in one call: it is translated into a chain of ibv_send_wr
// preallocated in C memory per QP, and polling translates many completions
// per call out of a C array preallocated per CQ. No Go pointer is stored in
// C memory, and the data path allocates nothing.
//
// Memory that is registered with [PD.RegMR] must not be Go heap memory: the
// NIC writes it behind the garbage collector's back. Use mmap'd memory (see
// internal/sys.MmapAnon) and keep it mapped until the MR is closed.
//
// # Threading
//
// Handles may be used from any goroutine. Verbs calls on different QPs and
// CQs may run concurrently. Calls on the same QP's send queue (PostSend), on
// the same receive queue (PostRecv) or on the same CQ (Poll) must not run
// concurrently with each other: each handle owns one preallocated batch
// buffer, as a wireguard-go bind owns its batch. [CompChannel.WaitEvent]
// parks the calling goroutine on Go's network poller; at most one goroutine
// may wait on a channel at a time. Close must not run
// concurrently with other calls on the same handle.
//
// # Lifetimes and close order
//
// Every handle has an idempotent, nil-safe Close. Close children before
// their parents:
//
//	QP, SRQ       before their CQs and PD
//	MR            before its PD, and before unmapping its memory
//	CQ            before its CompChannel and Context
//	PD, CompChannel before their Context
//
// Context.Close fails while PDs, CQs or channels opened from it are still
// open, and the library refuses to free a PD with MRs or QPs, or a CQ that a
// QP uses: the error says so and the handle stays open.
//
// [Live] counts the live objects of each kind so that tests can fail on a
// leaked QP, CQ, MR or PD.
package ibv

// Package ibv is xfer's binding to RDMA verbs (libibverbs) and the RDMA
// connection manager (librdmacm). It is the only package in the module that
// imports "C".
//
// # Loading
//
// Nothing is linked at build time: [Load] opens libibverbs.so.1 with dlopen
// and binds the versioned symbols it needs (ibv_*@IBVERBS_1.1) with dlvsym;
// the rdma_cm calls load librdmacm.so.1 (rdma_*@RDMACM_1.0) on first use. A
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
// # The kernel's rdma_cm without librdmacm
//
// [KCMChannel] sets up RC connections by talking to the kernel's rdma_cm
// character device (/dev/infiniband/rdma_cm) directly, for QPs made on the
// caller's own [Context] and [PD]; [RemovalWatch] uses it to hear that a
// device is being removed. Unlike [CMChannel] (librdmacm), it opens no verbs
// context of its own, so nothing in the process keeps a removed device from
// going away once the caller has closed its handles (see [KCMChannel]).
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
// buffer, as a wireguard-go bind owns its batch. [CompChannel.WaitEvent] and
// [CMChannel.GetEvent] park the calling goroutine on Go's network poller; at
// most one goroutine may wait on a channel at a time. Close must not run
// concurrently with other calls on the same handle.
//
// # Lifetimes and close order
//
// Every handle has an idempotent, nil-safe Close. Close children before
// their parents:
//
//	QP, SRQ       before their CQs and PD (a QP made by CMID.CreateQP is
//	              also closed by CMID.Close)
//	MR            before its PD, and before unmapping its memory
//	CQ            before its CompChannel and Context
//	PD, CompChannel before their Context
//	CMID          before its CMChannel; KCMID before its KCMChannel (a
//	              KCMID does not own the QP it connected)
//
// Context.Close fails while PDs, CQs or channels opened from it are still
// open, and the library refuses to free a PD with MRs or QPs, or a CQ that a
// QP uses: the error says so and the handle stays open. The [Context] of a
// [CMID] belongs to librdmacm; its Close does nothing.
//
// [Live] counts the live objects of each kind so that tests can fail on a
// leaked QP, CQ, MR or PD.
package ibv

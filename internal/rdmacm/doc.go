// Package rdmacm is a client of the kernel's RDMA connection manager that
// talks to its character device, /dev/infiniband/rdma_cm, directly, without
// librdmacm. It is plain Go: the few verbs calls it needs (moving a QP
// through INIT, RTR and RTS with the attributes the kernel computes, the
// kernel's index of a device) are exported by internal/ibv, the module's
// only cgo package.
//
// [Channel] sets up RC connections for QPs made on the caller's own
// ibv.Context and ibv.PD, as librdmacm's rdma_cm does, and [RemovalWatch]
// uses it to hear that a device is being removed. Unlike librdmacm, it
// opens no verbs context of its own, so nothing in the process keeps a
// removed device from going away once the caller has closed its handles
// (see [Channel]). Its ABI (the command structs of <rdma/rdma_user_cm.h>)
// is written by hand; TestABI checks it against the system's header.
//
// Off Linux every call returns an error matching [ErrNotSupported]; on
// Linux without the rdma_ucm module, so does [NewChannel].
//
// # Threading
//
// A Channel and its IDs may be used from any goroutine. [Channel.WaitEvent]
// and [Channel.GetEvent] park the calling goroutine on Go's network poller;
// at most one goroutine may wait on a channel at a time. Close must not run
// concurrently with other calls on the same handle.
//
// # Lifetimes and close order
//
// Every handle has an idempotent, nil-safe Close. Close each [ID] before
// its Channel (Channel.Close fails while IDs are open). An ID does not own
// the QP it connected: close the QP (ibv.QP.Close) before its CQs and PD,
// as usual. A [RemovalWatch] owns its channel and ID. [Live] counts the
// open channels, IDs and watches so that tests can fail on a leak.
package rdmacm

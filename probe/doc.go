// Package probe answers what this host and build can do for xfer: whether
// libibverbs loads, which RDMA devices, ports and GIDs exist, the memlock
// limit, huge pages, and whether the kernel has memfd and pidfd_getfd (the
// shm transport's needs). `xfer doctor` and `xfer devices` are built on it,
// and so may services that choose devices (kv's --devices).
//
// Each feature probe ([Verbs], [Memfd], [Pidfd]) answers, as cilium/ebpf's
// feature probes do:
//
//   - nil: the feature works here;
//   - an error matching [ErrNotSupported] (the module's one sentinel, so it
//     also matches xfer.ErrNotSupported) that says what is missing and how
//     to get it;
//   - any other error: the probe was inconclusive (a permission denied, a
//     resource exhausted); it says why.
//
// A conclusive answer (nil or not supported) is cached for the life of the
// process: the first call does the work and later calls return the same
// value. An inconclusive one is not cached, so a later call probes again.
//
// [Checkup] runs `xfer doctor`'s production checklist of an RDMA host on
// top of these: kernel modules, devices, ports, GIDs and MTUs, device
// files, memlock, huge pages, GPUs and the CUDA driver, each compared with
// a [CheckConfig] (the pool and the RDMA settings in use). It returns a
// [Report] of structured findings, each failure with the command that
// fixes it; printing it is the caller's business.
//
// Listings are not cached: [Devices], [MemlockLimit] and [Checkup] read
// the current state on every call, since devices come and go (`rdma link
// add`) and limits change.
//
// Every function is safe for concurrent use. Nothing returned holds a
// resource: there is nothing to close.
package probe

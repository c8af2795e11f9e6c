// Package cuda is xfer's binding to the CUDA driver API (libcuda.so.1): it
// lets xfer allocate, fill, copy and inspect GPU memory, and export it for
// RDMA (as a DMA-BUF file descriptor, or through GPUDirect RDMA by address)
// and for other processes (CUDA IPC handles). It does not launch kernels.
//
// # Loading
//
// Nothing is linked at build time, and building needs no CUDA toolkit:
// [Load] opens libcuda.so.1 with dlopen, binds the driver functions it needs
// with dlsym (the _v2 entry points where the driver API has them), calls
// cuInit and reads the driver's version. A binary that uses the package
// therefore starts on any Linux host; on one without the NVIDIA driver, or
// without a GPU, every call returns an error that matches [ErrNotAvailable]
// and, as an [*UnavailableError], says why and what to do about it. The
// driver API types and constants the package needs are declared in
// cuda_abi.h; TestABI checks them against the system's cuda.h when one is
// installed. cuMemGetHandleForAddressRange (CUDA 11.7) is optional: with an
// older driver, [Context.DMABufFD] fails and the rest works.
//
// Built without cgo (CGO_ENABLED=0) or for another OS, the package keeps
// the same API ([Built] is false), and every call returns an error wrapping
// [ErrNotAvailable] that says why.
//
// # Devices and contexts
//
// A device is named by its ordinal, as CUDA numbers the devices this
// process can see (after CUDA_VISIBLE_DEVICES; mem.ParseLocation reads the
// names that users write, "cuda:1"). [Retain] retains the
// device's primary context, the one context per device that the CUDA
// runtime, and so PyTorch and every other runtime user in the process,
// shares: memory that xfer allocates is usable by them and the other way
// round.
//
// # Threading
//
// Every method that needs a context makes its [Context] current on the OS
// thread, makes its driver call(s), and restores the thread's previous
// context, all within one cgo call. Callers need no runtime.LockOSThread,
// and any goroutine may call any method; the calling thread's current
// context (the one a CUDA runtime user may have set) is left as it was.
//
// Handles may be used from many goroutines at once. Close may run
// concurrently with other calls on the same handle: it waits for calls in
// progress, and calls after it fail with an error matching net.ErrClosed.
// [Stream.Sync] and [Event.Sync] block their OS thread until the device is
// done; [Event.Done] polls without blocking.
//
// # Lifetimes and close order
//
// Every handle has an idempotent, nil-safe Close. Close children before
// their parents:
//
//	Events, Streams              before their Context
//	device memory (Free),        before the Context (the driver frees what is
//	IPC mappings (CloseIPC),     left when the primary context's last user
//	host memory (HostUnregister) releases it)
//	DMA-BUF descriptors          closed by the caller once the NIC has
//	                             deregistered them
//	host memory (munmap)         after HostUnregister
//
// [Context.Close] fails while Streams or Events made from it are open: the
// error says so and the Context stays open. Memory is not tracked; freeing
// it is the caller's job.
//
// Host memory that the device reads or writes (a copy's source or target,
// [Context.HostRegister]) must not be Go heap memory that the garbage
// collector may free while the device uses it; use mmap'd memory (see
// internal/sys.MmapAnon).
package cuda

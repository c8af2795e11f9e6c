// Command libxfer is the C ABI of the connector (package connector), built
// as a shared library for the Python binding (python/xfer) and any other
// language with a C foreign-function interface:
//
//	go build -buildmode=c-shared -o libxfer.so ./cmd/libxfer
//
// writes libxfer.so and its header libxfer.h. docs/PYTHON.md describes the
// ABI next to the Python package built on it.
//
// The ABI is small and versioned: xfer_abi_version returns ABIVersion, and
// a caller refuses a library of another version. Every call returns an
// error code (0 for success, a negative Code otherwise) and writes the
// error's message into a buffer the caller passes (err, errlen): there is
// no shared last-error state, so calls from many threads do not race. No
// call panics across the boundary: each export recovers and reports a
// panic as CodeInternal.
//
// Configuration: xfer_open takes a JSON object, the document of package
// config's Library program: the xfer command's config file as JSON (every
// engine key, flat or nested, and the log keys) plus the connector's keys
// (role, producer, ttl_seconds, pull, chunk_size, wait_for_memory,
// wait_spin, call_timeout, and device, another name of rdma.device). wait_spin
// defaults to connector.ThreadWaitSpin here: a call waits on its caller's
// thread, which spins that long for a Get's answer before it sleeps. A refused document's error names
// every unknown key, each with its line.
//
// Handles: a connector and a buffer are named by integers (never Go
// pointers). The only pointers handed out point into the connector's
// registered pool, which is mmap'd memory, not the Go heap; they are valid
// until the buffer's release, its publication or the connector's close.
// Object data handed back (JSON) is allocated with C's malloc and freed by
// the caller with xfer_free.
//
// A process that forks after loading the library must not call it in the
// child: the Go runtime's threads do not survive fork. The Python binding
// checks for that and raises an error instead; other callers must do the
// same.
//
// Mooncake's TransferEngine: the xfer_mc_* calls (mcabi.go) are a second,
// separate surface, the engine half of python/xfer/mooncake/engine.py. An
// engine handle is an xfer Engine listening on the caller's host name,
// which registers ranges of the caller's own memory (any host memory:
// malloc'd, numpy's, torch's), lists them in a segment table that peers
// read (mcsegment.go), and moves batches of WRITEs and READs to a peer
// named by its segment ("host:rpc_port"), at raw addresses in that peer's
// address space. A sync batch may carry a notification, which the target
// receives after the batch's data, as a message its engine queues until
// the caller takes it (mcnotify.go). Those calls return Mooncake's error codes (mcCode, the
// values of Mooncake's error.h), not the connector's Codes.
// docs/MOONCAKE.md describes what is compatible and what differs.
//
// Mooncake's store: the xfer_mcs_* calls (mcstoreabi.go) are a third
// surface, the Go half of python/xfer/mooncake/store.py: a client of
// `xfer mooncake master` over an engine of the second surface, with a
// segment of its memory in the store's pool and a local buffer that
// stages bytes (mcstore.go). They return Mooncake's store codes
// (types.h's ErrorCode), or a size or count.
//
// Without cgo (CGO_ENABLED=0) the command builds to a program that says
// the library needs cgo.
package main

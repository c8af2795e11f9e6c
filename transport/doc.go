// Package transport defines the contract between the xfer engine and the
// transports that move its bytes: tcp, shm and rdma (verbs).
//
// The engine performs the handshake on a TCP connection, picks a transport,
// and hands the connection to Transport.Connect, which returns an Endpoint.
// Endpoints are batch-first: Post takes many operations and completion is
// reported per operation through the Completer each Op carries.
//
// Every transport must pass two conformance suites, run from its own
// package's tests: package transport/transporttest checks this contract
// alone, endpoint against endpoint, and package xfertest the whole engine
// over the transport. Package transport/twin is an in-memory transport
// that passes the first, for testing the layers above without a wire.
//
// A transport describes itself through the Transport interface: Caps,
// what it can do (its package exports the same value as a variable, Caps,
// which the engine's transport table reads before it builds any
// transport), and Devices, the devices it has open, for status and
// metrics.
//
// Optional interfaces: what only some transports do. Whoever holds the
// endpoint, transport or host checks for each with a type assertion, and
// does without it:
//
//   - Poller (endpoints: rdma's over one device). PollUntil finds the
//     completions of a batch being waited for in the waiting goroutine.
//     Without it, Batch.Wait waits for them to be handed over.
//   - Progresser (endpoints: tcp's and shm's, through the stream, and
//     rdma's). Progress counts the bytes moved and the operations
//     pending: the op_timeout watchdog closes a peer whose count stops,
//     and a connection retired by failback is closed once nothing is
//     pending on it. Without it, the watchdog does not watch the peer,
//     and a retired connection is closed after a tenth of a second.
//   - Appender (endpoints: tcp's, shm's and rdma's). AppendSend encodes a
//     message straight into the send queue. Without it, the engine posts
//     the message as an OpSend from a buffer of registered memory.
//   - Counter (endpoints: tcp's and shm's). Counts are the endpoint's own
//     counts of operations and bytes, which the metrics read when they
//     are scraped. Without it, the engine counts each operation itself.
//   - DeviceMover (endpoints: shm's, with CUDA IPC). MovesDevice says that
//     the endpoint moves an operation's GPU memory itself. Without it, the
//     engine stages GPU memory through host buffers.
//   - Registrar (transports: rdma's). RegionAdded and RegionRemoved tell
//     the transport of each region the engine registers and deregisters,
//     so that it releases its own registration before the memory is
//     unmapped. Without it, the transport is told nothing.
//   - Exporter (hosts: the engine's). Exports lists the regions the engine
//     exports, whose keys rdma sends with its queue pair numbers. Without
//     it (transporttest's Host), a peer attaches each region on first use.
//   - Announcer (endpoints: tcp's, shm's and rdma's) and ExportReceiver
//     (hosts: the engine's). AnnounceExport tells the peer of a region
//     exported after the handshake; the peer's host takes it with
//     ReceiveExport. Without them, a peer learns a region's name only from
//     a later handshake (the twin's endpoints).
//
// Threading: Post, Cancel, Consumed and Revoke may be called from many
// goroutines at once. Completers are called from the endpoint's goroutines
// and must not block or call Post.
//
// Lifetimes: an Endpoint owns the connection it was given. Close fails all
// outstanding operations with an error matching net.ErrClosed, releases
// every resource and waits for the endpoint's goroutines.
package transport

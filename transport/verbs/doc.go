// Package verbs is xfer's RDMA transport ("rdma"): one-sided WRITE and READ,
// write-with-notify and SEND/RECV on reliable-connected queue pairs, over
// InfiniBand, RoCE and iWARP (SoftRoCE and SoftiWARP included). It is built
// on internal/ibv, the module's binding to libibverbs, and on
// internal/rdmacm for connections set up through the kernel's rdma_cm.
//
// # What it does
//
// A [Transport] opens one device per engine, chosen by [Config] (the first
// ACTIVE port by default; on RoCE a RoCE v2 IPv4-mapped GID, never a
// link-local one). Memory is registered once per region, whole, on first
// use, and deregistered before it is unmapped ([Transport.Forget]). Each
// peer gets [Config.QPsPerPeer] RC queue pairs plus the handshaken TCP
// connection, kept as a control stream for region attach, revocation, SEND
// credits and liveness. The queue pairs are connected by the engine's own
// exchange (wire.VerbsInfo) or, on iWARP and with [Config.UseCM], through
// the kernel's rdma_cm. WRITE and READ are cut into [Config.SliceSize]
// slices spread over the queue pairs, and the slices of all the WRITEs and
// READs of one Post go to each queue pair as one chain; a write-with-notify
// is one WRITE_WITH_IMM (on iWARP, the data and then an inline SEND).
//
// With [Config.Devices] it opens several devices (rails) and connects a
// peer over each rail both sides have: large WRITEs and READs are cut over
// the rails, small ones go to the least loaded one, and those in flight on
// a rail that fails are repeated on another; the connection takes the rail
// back once its device is usable again ([RailEndpoint]).
//
// Without cgo, off Linux, without libibverbs.so.1 or without a usable
// device, [Transport.Available] returns an error matching
// transport.ErrNotSupported that says what is missing, and the engine's
// auto policy uses shm or tcp.
//
// The internals are described in full in ../../docs/RDMA.md (docs/RDMA.md
// of the module): the binding, memory registration (GPU memory included),
// how queue pairs are connected, posting, completion polling and device
// removal.
//
// # Threading
//
// Completions are polled per device, not per peer: a device has at most
// 16 completion queues, each with one poller goroutine that busy-polls while
// operations are posted and sleeps on the completion channel after
// [Config.PollIdle] without traffic (or, with [Config.UseEventChannel],
// after [Config.PollSpin]). A Post of a single small operation polls for
// its own completion in the posting goroutine for up to a millisecond, and
// so does a goroutine that waits for a batch (Endpoint.PollUntil); while
// callers take every completion that way, the busy poller naps instead of
// spinning beside them.
// Completion callbacks (transport.Completer) and message handlers run in
// the poller's goroutine or in such a posting goroutine: they must not
// block, must not post a single operation while holding a lock that a
// handler or completer takes, and must not close the endpoint. Endpoints
// may be used from any number of goroutines; posters to one queue pair
// serialise on its lock, and a full send queue makes a poster wait until
// completions free room.
//
// # Lifetimes
//
// Nothing is opened until the transport is first used. An endpoint's Close
// destroys its queue pairs first and then waits for its completion queue's
// poller to drop it, so no completion reaches a released peer. Any error
// completion takes the endpoint down; the engine dials a new one on the
// next operation. When the kernel reports that the device is being removed
// (`rdma link delete`, an unbound driver), every endpoint on it fails and
// every verbs object of the device is freed, so that the removal can
// finish; the transport is unavailable until a device is back.
// [Transport.Close] releases the device (registrations, protection domain,
// context); the engine calls it after it has closed every peer and region.
package verbs

// Package pages fetches fixed-size pages of a remote address space with
// one-sided READs: the building block for resolving remote page faults
// (a VM's guest-physical memory spread over hosts, a disaggregated
// memory pool).
//
// A Server exports a guest-physical address (GPA) space of Size bytes, cut
// into pages of PageSize (4 KiB by default, 2 MiB as an option), from
// registered memory: its engine exports it under the name "pages", and it
// takes no part in fetches after the handshake. A Client maps each GPA range
// to the node that owns it (AddNode) and:
//
//   - FetchPage reads one page with one READ straight into a buffer of
//     the client's registered memory: no copy on either side;
//   - FetchPages reads many, one submission per node;
//   - a Pipeline (NewPipeline) keeps up to depth fetches in flight for a
//     stream of faults: Start queues one, Next returns the oldest once it
//     is done, and a full pipeline allocates nothing per fetch;
//   - WritePage writes a page back, to a server that is Writable: by
//     default a server exports its pages read-only, and the transport
//     refuses a client's WRITE below the client's engine (the NIC on rdma,
//     the kernel's read-only mapping on shm);
//   - Prefetch starts reading pages into a small cache of the client's, from
//     which a later FetchPage of the same page is a local copy.
//
// A Client's methods are safe for concurrent use; a Pipeline belongs to
// one goroutine at a time, and its buffers to its fetches until Next
// returns them. Close a Pipeline before dropping it, and the Client last.
//
// The latency of every fetch is recorded (Client.Latency). A GPA that is not
// page-aligned or that no node owns is an error at once; a node that has
// gone fails the fetch within its ctx's deadline (xfer.ErrPeerLost), and
// one that stopped or hung within the engine's op_timeout even when the
// ctx has none (xfer.ErrStalled, naming the node).
package pages

// Package xfer is an RDMA-class transfer engine: it moves bytes between
// processes and hosts over RDMA verbs, shared memory or TCP behind one API.
//
// An Engine owns registered memory (mmap'd regions, never the Go heap, with a
// pool allocator on top), listens for peers and dials them. A Peer is a
// connection to another engine, made by a versioned handshake that
// authenticates both sides when a shared secret is configured and picks the
// transport under the policy (auto, tcp, shm, rdma). On a peer either side
// can:
//
//   - Write and Read: one-sided, straight between registered memory on both
//     sides, checked by the target against the region's key, rights and
//     bounds;
//   - WriteNotify: a write after which the target gets a Notification;
//   - Send and Recv: two-sided messages, in order, flow-controlled;
//   - Submit: a batch of any of these, with one Batch to wait on or poll and
//     an error per operation.
//
// Regions are described to peers by a RegionDesc (ID, address range, key,
// rights), which serializes to 48 bytes or a text form. An engine can
// Export regions by name; peers see them in the handshake (Peer.Region).
//
// Engines can find each other by node ID through a directory
// (Config.Directory: an xfer coordinator or an etcd cluster, package
// directory): an engine with a NodeID registers its addresses, transports
// and exports' names, and DialNode resolves a node and dials it. The
// directory says where a node is, never how to reach its memory: keys
// travel only in the authenticated handshake.
//
// # Threading
//
// Engines, peers and batches are safe for concurrent use. A buffer passed to
// an operation belongs to the operation until it completes.
//
// # Every operation ends
//
// A call whose context ends returns at once. Past that, Config.OpTimeout
// bounds a peer's silence: a peer that makes no progress for it while
// operations are outstanding has its connection closed, and they fail
// with a *StallError (ErrStalled) that names it. A goroutine waiting for
// a peer to send (Peer.Recv, Peer.WaitNotify) is no operation the peer
// owes, so a quiet peer with waiters is probed: an idle live peer answers
// and the wait goes on as long as its context; a stalled one does not,
// and the wait fails with a *StallError. A wait whose connection fails
// fails with ErrPeerLost. Engine.WaitNotify, which waits for every peer,
// probes them all, and tells of each peer lost (stalled or not) with a
// *PeerLostError that names it, and goes on for the others. A READ or a
// WRITE, alone or in a batch of only those, whose connection is lost is
// repeated on a new one. The services (kv, connector) bound each call
// whose context has no deadline by a multiple of OpTimeout.
//
// # Lifetimes and close order
//
// Close peers (optional), then regions (optional), then the engine: closing
// the engine first removes its directory entry, then closes its peers (their operations in flight fail with an error
// matching ErrClosed, which is net.ErrClosed), stops listening, deregisters
// and unmaps every region, and returns after every goroutine it started has
// exited. Every Close is idempotent and nil-safe. A dialed peer whose
// connection fails is dialed again by its next operation.
package xfer

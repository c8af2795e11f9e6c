// Package directory is how xfer engines find each other by node ID: a node
// registers an Entry (where it listens, its transports, the names of the
// regions it exports, and an RDMA endpoint when it publishes one ahead of
// time), and others look it up, list the nodes, or watch them join and
// leave.
//
// One interface, Directory, has three backends, chosen by URL (Open):
//
//   - "p2p" (or ""): no directory. The engine's handshake is the only
//     exchange; node IDs cannot be resolved.
//   - "http://HOST:PORT": a coordinator (Coordinator, `xfer coordinator`),
//     a small HTTP service that keeps entries in memory and drops those whose
//     node stops sending heartbeats. It suits small clusters and is not
//     highly available: when it is down, nodes cannot be looked up (peers
//     already connected carry on).
//   - "etcd://HOST:2379[,HOST:2379...]/PREFIX": an etcd cluster. Each entry
//     lives under PREFIX/nodes/ID, bound to a lease that the registering
//     node keeps alive, so the entry of a node that dies disappears when its
//     lease expires, and watchers see it leave.
//
// An entry carries no secret: it says where a node is, not how to reach its
// memory. Region keys travel only in the engine's handshake, which
// authenticates both sides when a secret is configured, so a forged entry
// leads a dialer to a peer that cannot pass the handshake. Entries read
// from a backend are validated; a malformed one is an error (Lookup) or is
// skipped and logged (List, Watch), never a crash.
package directory

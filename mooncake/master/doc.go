// Package master is the master of Mooncake's distributed store
// (MooncakeDistributedStore) on xfer: `xfer mooncake master`, serving
// masterpb's Master service over gRPC.
//
// Clients mount segments, ranges of their own memory registered with
// their transfer engines; the master hands out places in them (best fit,
// aligned to 64 bytes) to the objects any client puts, and tells readers
// where an object's replicas lie. Object bytes never pass through it.
//
// The semantics are Mooncake's master's (master_service.cpp):
//
//   - A put is PutStart (places for replica_num replicas on distinct
//     segments: the preferred segments first, in order, then others from
//     a random start; fewer than asked when fewer segments have room, but
//     at least one, else CodeNoAvailableHandle), the client's WRITEs, then
//     PutEnd (the object becomes visible) or PutRevoke (its places are
//     freed). A key being put refuses another PutStart
//     (CodeObjectAlreadyExists) until its put is older than the put-start
//     discard timeout; a committed key refuses one unless it is an upsert,
//     whose PutEnd swaps the new places in and frees the old ones only
//     once the read lease on the old value ends.
//   - GetReplicaList and Exist grant a read lease of LeaseTTL on each
//     committed object they return: while it lasts, the object is not
//     removed (CodeObjectHasLease, unless forced) nor evicted, so that a
//     reader never sees its bytes overwritten.
//   - When a put finds no room, or the pool's usage passes the high
//     watermark, the master evicts about EvictionRatio of the used bytes,
//     least recently used first, among committed objects whose lease ended
//     and that are not hard-pinned; soft-pinned objects (for their TTL)
//     go last, and only if allowed.
//   - A client pings; one not heard from for ClientTTL is dead and its
//     segments are unmounted. An unmounted segment's replicas leave their
//     objects, and an object left with none is gone.
//
// Alone, the master keeps everything in memory: a restart forgets every
// object, and clients mount their segments again when their next Ping
// answers remount. Masters that share an etcd (StartHA, ha.go) elect a
// leader that serves and standbys that refuse calls; the leader writes
// the segments and the committed objects to etcd behind the calls, and
// a standby elected in its place loads them and serves on. DialLeader is
// the client that follows the leader.
//
// With a shared secret, every call must prove it (ServerOptions, auth.go);
// Dial is the client's side.
package master

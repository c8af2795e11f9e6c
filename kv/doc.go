// Package kv is the xfer KV service: a key-value store whose values move on
// the xfer engine's data plane while a gRPC service coordinates.
//
// A GET sends the key and the descriptor of a buffer in the client's
// registered pool; the server WRITEs the value straight into that buffer and
// replies with its length. A PUT sends the descriptor of
// the buffer holding the value; the server reserves a slot in its pool, READs
// the value into it, and only then makes it the key's value. Values up to a
// few KiB travel inline in the gRPC messages instead, which is faster for
// them (see DefaultInlineMax). On the rdma transport the server's NIC moves
// the bytes; on shm a single copy between the processes' shared mappings;
// on tcp the engines' own sockets.
//
// Why the server READs a PUT rather than the client writing into a reserved
// slot: one gRPC round trip instead of two (reserve, then commit), and the
// slot never belongs to the client, so a client that dies mid-PUT cannot
// leave it allocated or half-written: the READ fails, the server frees the
// slot, and the key keeps its previous value.
//
// Consistency: a stored value is never written again. PUT commits a new slot
// and swaps it in; the old slot is freed once the last GET reading it is
// done (reference counts), so a reader never sees a torn value, and every
// GET returns some completed PUT's value. Versions grow with every PUT.
//
// Capacity: the server's pool has a fixed size. When a PUT does not fit,
// or takes the pool past its high watermark, the server evicts least
// recently used values (FullPolicy Evict, the default), or refuses a PUT
// that does not fit with a "full" error (Reject). As in Mooncake's store,
// a GET leases its value (no eviction, no DELETE unless forced, until the
// lease ends), and a PUT may pin its value softly (evicted last, for a
// TTL) or hard (never evicted); MooncakeCode maps the errors to
// Mooncake's codes. A Cluster may store each value on several servers
// (ClusterOptions.Replicas). docs/KV.md, "Leases, pins and eviction".
//
// Reconnection: when the server restarted, the client says Hello again and
// redials the data plane by itself. The dead fail fast and the slow fail on
// time: a server whose address refuses or resets connections is tried
// again for the client engine's reconnect_wait (2 s), then the call fails
// with a *DownError; one that accepts but does not answer fails a call
// without a deadline after the engine's op_timeout (10 s), with a
// *StalledError. ClientOptions.CallTimeout, when set, is a longer bound
// that rides through a restart instead: calls wait for the server (gRPC
// WaitForReady) up to it.
package kv

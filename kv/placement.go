package kv

// Placement: the servers of a cluster are those that list ServiceName in
// their directory entries, and a key lives on the server that
// kv/internal/placement's ring gives it (consistent hashing), its replicas
// on the next ones. Clients place keys by it (Cluster.pick), and each
// server's fence answers only the keys it holds by it (fence.go): both
// must agree.

// ServiceName is the name under which a KV server lists its gRPC address
// in its node's directory entry (xfer.Engine.SetService), and under which
// a Cluster finds it.
const ServiceName = "kv"

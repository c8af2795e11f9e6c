package kv

// Placement: the servers of a cluster are those that list ServiceName in
// their directory entries, and a key lives on the one where its rendezvous
// weight is highest. Clients place keys by it (Cluster.pick), and each
// server's fence answers only the keys it owns by it (fence.go): both must
// agree.

// ServiceName is the name under which a KV server lists its gRPC address
// in its node's directory entry (xfer.Engine.SetService), and under which
// a Cluster finds it.
const ServiceName = "kv"

// weight is key's rendezvous weight on a server whose ID hashes to seed.
func weight[K string | []byte](key K, seed uint64) uint64 {
	h := seed ^ 0xcbf29ce484222325
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 0x100000001b3
	}
	// splitmix64's finaliser: FNV's low bits alone spread poorly.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

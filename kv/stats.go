package kv

import "github.com/xferio/xfer/kv/kvpb"

// Stats are a server's counters. Sizes are in bytes.
type Stats struct {
	// Keys and ValueBytes are the stored values and their total length.
	Keys, ValueBytes uint64
	// Capacity is the size of the value pool; PoolUsed what values and PUTs
	// in progress hold of it (rounded up to the pool's alignment), and
	// Fragmentation how splintered its free space is (0 to 1).
	Capacity, PoolUsed uint64
	Fragmentation      float64
	// Request counts; Hits+Misses = GETs that had a valid key.
	Gets, Hits, Misses, Puts, Deletes uint64
	// Evictions counts values evicted to make room, RejectedFull the PUTs
	// refused because the pool was full; FullPolicy says which of the two
	// the server does.
	Evictions, RejectedFull uint64
	FullPolicy              FullPolicy
	// DataPlaneBytes and InlineBytes count value bytes moved by one-sided
	// operations and inside gRPC messages.
	DataPlaneBytes, InlineBytes uint64
	// AbortedPuts counts PUTs that failed after reserving a slot (the client
	// died, its buffer was refused); their slots were freed.
	AbortedPuts uint64
}

func (s Stats) proto() *kvpb.StatsResponse {
	return &kvpb.StatsResponse{
		Keys: s.Keys, ValueBytes: s.ValueBytes, Capacity: s.Capacity, PoolUsed: s.PoolUsed,
		Fragmentation: s.Fragmentation, Gets: s.Gets, Hits: s.Hits, Misses: s.Misses,
		Puts: s.Puts, Deletes: s.Deletes, Evictions: s.Evictions, RejectedFull: s.RejectedFull,
		FullPolicy: string(s.FullPolicy), DataPlaneBytes: s.DataPlaneBytes, InlineBytes: s.InlineBytes,
		AbortedPuts: s.AbortedPuts,
	}
}

func statsFromProto(p *kvpb.StatsResponse) Stats {
	return Stats{
		Keys: p.Keys, ValueBytes: p.ValueBytes, Capacity: p.Capacity, PoolUsed: p.PoolUsed,
		Fragmentation: p.Fragmentation, Gets: p.Gets, Hits: p.Hits, Misses: p.Misses,
		Puts: p.Puts, Deletes: p.Deletes, Evictions: p.Evictions, RejectedFull: p.RejectedFull,
		FullPolicy: FullPolicy(p.FullPolicy), DataPlaneBytes: p.DataPlaneBytes, InlineBytes: p.InlineBytes,
		AbortedPuts: p.AbortedPuts,
	}
}

package kv

import "github.com/xferio/xfer/kv/kvpb"

// Stats are a server's counters. Sizes are in bytes.
type Stats struct {
	// Keys and ValueBytes are the stored values and their total length.
	Keys       uint64 `json:"keys"`
	ValueBytes uint64 `json:"value_bytes"`
	// Capacity is the size of the value pool; PoolUsed what values and PUTs
	// in progress hold of it (rounded up to the pool's alignment), and
	// Fragmentation how splintered its free space is (0 to 1).
	Capacity      uint64  `json:"capacity"`
	PoolUsed      uint64  `json:"pool_used"`
	Fragmentation float64 `json:"fragmentation"`
	// Request counts; Hits+Misses = GETs that had a valid key.
	Gets    uint64 `json:"gets"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
	Puts    uint64 `json:"puts"`
	Deletes uint64 `json:"deletes"`
	// Evictions counts values evicted to make room, RejectedFull the PUTs
	// refused because the pool was full; FullPolicy says which of the two
	// the server does.
	Evictions    uint64     `json:"evictions"`
	RejectedFull uint64     `json:"rejected_full"`
	FullPolicy   FullPolicy `json:"full_policy"`
	// DataPlaneBytes and InlineBytes count value bytes moved by one-sided
	// operations and inside gRPC messages.
	DataPlaneBytes uint64 `json:"data_plane_bytes"`
	InlineBytes    uint64 `json:"inline_bytes"`
	// AbortedPuts counts PUTs that failed after reserving a slot (the client
	// died, its buffer was refused); their slots were freed.
	AbortedPuts uint64 `json:"aborted_puts"`
	// Disk is the disk tier's counters; nil without one. Keys counts the
	// values on disk too, ValueBytes only those in memory.
	Disk *DiskStats `json:"disk,omitempty"`
}

// DiskStats are a server's disk tier counters (kvpb.DiskStats says what
// each means).
type DiskStats struct {
	Capacity          uint64 `json:"capacity"`
	Used              uint64 `json:"used"`
	Keys              uint64 `json:"keys"`
	Hits              uint64 `json:"hits"`
	Promotions        uint64 `json:"promotions"`
	Demotions         uint64 `json:"demotions"`
	Queue             uint64 `json:"queue"`
	Evictions         uint64 `json:"evictions"`
	WriteErrors       uint64 `json:"write_errors"`
	ReadErrors        uint64 `json:"read_errors"`
	Corrupt           uint64 `json:"corrupt"`
	DroppedTooLarge   uint64 `json:"dropped_too_large"`
	DroppedWriteError uint64 `json:"dropped_write_error"`
	DroppedRead       uint64 `json:"dropped_read"`
}

func (d *DiskStats) proto() *kvpb.DiskStats {
	if d == nil {
		return nil
	}
	return &kvpb.DiskStats{Capacity: d.Capacity, Used: d.Used, Keys: d.Keys, Hits: d.Hits, Promotions: d.Promotions,
		Demotions: d.Demotions, Queue: d.Queue, Evictions: d.Evictions, WriteErrors: d.WriteErrors, ReadErrors: d.ReadErrors,
		Corrupt: d.Corrupt, DroppedTooLarge: d.DroppedTooLarge, DroppedWriteError: d.DroppedWriteError, DroppedRead: d.DroppedRead}
}

func diskStatsFromProto(p *kvpb.DiskStats) *DiskStats {
	if p == nil {
		return nil
	}
	return &DiskStats{Capacity: p.Capacity, Used: p.Used, Keys: p.Keys, Hits: p.Hits, Promotions: p.Promotions,
		Demotions: p.Demotions, Queue: p.Queue, Evictions: p.Evictions, WriteErrors: p.WriteErrors, ReadErrors: p.ReadErrors,
		Corrupt: p.Corrupt, DroppedTooLarge: p.DroppedTooLarge, DroppedWriteError: p.DroppedWriteError, DroppedRead: p.DroppedRead}
}

func (s Stats) proto() *kvpb.StatsResponse {
	return &kvpb.StatsResponse{
		Keys: s.Keys, ValueBytes: s.ValueBytes, Capacity: s.Capacity, PoolUsed: s.PoolUsed,
		Fragmentation: s.Fragmentation, Gets: s.Gets, Hits: s.Hits, Misses: s.Misses,
		Puts: s.Puts, Deletes: s.Deletes, Evictions: s.Evictions, RejectedFull: s.RejectedFull,
		FullPolicy: string(s.FullPolicy), DataPlaneBytes: s.DataPlaneBytes, InlineBytes: s.InlineBytes,
		AbortedPuts: s.AbortedPuts, Disk: s.Disk.proto(),
	}
}

func statsFromProto(p *kvpb.StatsResponse) Stats {
	return Stats{
		Keys: p.Keys, ValueBytes: p.ValueBytes, Capacity: p.Capacity, PoolUsed: p.PoolUsed,
		Fragmentation: p.Fragmentation, Gets: p.Gets, Hits: p.Hits, Misses: p.Misses,
		Puts: p.Puts, Deletes: p.Deletes, Evictions: p.Evictions, RejectedFull: p.RejectedFull,
		FullPolicy: FullPolicy(p.FullPolicy), DataPlaneBytes: p.DataPlaneBytes, InlineBytes: p.InlineBytes,
		AbortedPuts: p.AbortedPuts, Disk: diskStatsFromProto(p.Disk),
	}
}

package kv

import (
	"context"

	"github.com/xferio/xfer/kv/kvpb"
)

// Stats implements kvpb.KVServer.
func (s *Server) Stats(ctx context.Context, _ *kvpb.StatsRequest) (*kvpb.StatsResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	st := s.Snapshot()
	return st.proto(), nil
}

// Snapshot returns the server's counters.
func (s *Server) Snapshot() Stats {
	keys, bytes := s.st.counts()
	ps := s.e.Pool().Stats()
	return Stats{
		Keys: uint64(keys), ValueBytes: bytes, Capacity: ps.Capacity, PoolUsed: ps.InUse,
		Fragmentation: ps.Fragmentation,
		Gets:          s.gets.Load(), Hits: s.hits.Load(), Misses: s.misses.Load(),
		Puts: s.puts.Load(), Deletes: s.deletes.Load(),
		Evictions: s.st.evictions.Load(), RejectedFull: s.st.rejected.Load(),
		FullPolicy:     s.opts.Full,
		DataPlaneBytes: s.planeBytes.Load(), InlineBytes: s.inlineBytes.Load(),
		AbortedPuts: s.st.aborted.Load(),
		Disk:        s.st.disk.stats(s.st),
	}
}

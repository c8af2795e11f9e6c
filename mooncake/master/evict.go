package master

import (
	"cmp"
	"slices"
	"time"
)

// evictForLocked makes room for need more bytes of a put that found none:
// it evicts EvictionRatio of the used bytes, and at least need, unless
// EvictionRatio is 0 (as Mooncake, which then evicts only past the
// watermark). It returns the number of objects evicted.
func (s *Service) evictForLocked(now time.Time, need uint64, exclude string) int {
	if s.o.EvictionRatio == 0 {
		return 0
	}
	used, _ := s.usageLocked()
	return s.evictLocked(now, max(need, uint64(s.o.EvictionRatio*float64(used))), exclude)
}

// evictLocked frees about target bytes by removing objects, the least
// recently used (got or put) first, among the committed ones that no put
// is replacing, whose read lease has ended and that are not hard-pinned;
// soft-pinned ones only after every other, and only unless
// NoEvictSoftPinned. The key exclude (the put that asked) is spared. It
// returns the number of objects evicted.
func (s *Service) evictLocked(now time.Time, target uint64, exclude string) int {
	type cand struct {
		key     string
		o       *object
		softPin bool
	}
	var cands []cand
	for k, o := range s.objects {
		if k == exclude || !o.committed() || o.pending != nil || o.hardPin || now.Before(o.lease) {
			continue
		}
		soft := now.Before(o.softPinUntil)
		if soft && s.o.NoEvictSoftPinned {
			continue
		}
		cands = append(cands, cand{k, o, soft})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.softPin != b.softPin {
			if a.softPin {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.o.touched, b.o.touched)
	})
	var freed uint64
	n := 0
	for _, c := range cands {
		if freed >= target {
			break
		}
		for _, p := range c.o.places {
			freed += p.size
		}
		s.st.EvictedBytes += c.o.size * uint64(len(c.o.places))
		s.removeLocked(c.key, c.o)
		n++
	}
	if n > 0 {
		s.st.Evictions += uint64(n)
		s.o.Logger.Debug("mooncake master: evicted", "objects", n, "bytes", freed)
	}
	return n
}

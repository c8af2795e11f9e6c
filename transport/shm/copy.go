package shm

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// copyMem copies src to dst.
//
// Go's copy moves 1 MiB or more with non-temporal stores (the amd64
// runtime's memmove), which bypass the cache: right for a copy larger
// than the cache, wrong for one that fits, whose bytes the peer (a core
// sharing the same last-level cache) is about to read. On a 2-vCPU AMD
// EPYC with 32 MiB of L3, a hot copy of 1 to 8 MiB moved 36–39 GB/s in one
// piece and 41–59 GB/s in pieces of 512 KiB; at 16 MiB the pieces moved
// 35 GB/s against 37 (docs/TUNING.md, "Copies that fit in the cache"). So a copy of up to a quarter of the last-level
// cache (glibc's memcpy uses non-temporal stores from about there) goes in
// pieces below the runtime's threshold, and a larger one whole.
func copyMem(dst, src []byte) {
	n := min(len(dst), len(src))
	if n < 2*temporalPiece || n > temporalMax() {
		copy(dst, src)
		return
	}
	for off := 0; off < n; off += temporalPiece {
		end := min(off+temporalPiece, n)
		copy(dst[off:end], src[off:end])
	}
}

// temporalPiece is the piece of a copy made with ordinary stores: below
// the 1 MiB at which the runtime's memmove turns to non-temporal ones.
const temporalPiece = 512 << 10

// defaultTemporalMax is temporalMax where the cache's size is not known.
const defaultTemporalMax = 4 << 20

// temporalMax is the largest copy made in pieces: a quarter of the
// last-level cache that sysfs reports for CPU 0.
var temporalMax = sync.OnceValue(func() int {
	for _, idx := range []string{"index3", "index2"} {
		b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cache/" + idx + "/size")
		if err != nil {
			continue
		}
		if n := parseCacheSize(string(b)); n > 0 {
			return max(n/4, 2*temporalPiece)
		}
	}
	return defaultTemporalMax
})

// parseCacheSize parses sysfs's cache size ("32768K", "2M", "512"); 0 when
// it cannot.
func parseCacheSize(s string) int {
	s = strings.TrimSpace(s)
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1<<40/mult {
		return 0
	}
	return n * mult
}

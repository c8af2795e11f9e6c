package sys

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// MemlockLimit returns the soft (cur) and hard (max) RLIMIT_MEMLOCK limits
// of the process in bytes: how much memory it may pin, which RDMA
// registration needs. An unlimited value (RLIM_INFINITY) is returned as
// math.MaxUint64.
func MemlockLimit() (cur, max uint64, err error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return 0, 0, fmt.Errorf("getrlimit RLIMIT_MEMLOCK: %w", err)
	}
	return rlim(rl.Cur), rlim(rl.Max), nil
}

func rlim(v uint64) uint64 {
	if v == unix.RLIM_INFINITY {
		return math.MaxUint64
	}
	return v
}

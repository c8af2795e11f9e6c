//go:build !linux

package sys

import "fmt"

// MemlockLimit returns the RLIMIT_MEMLOCK limits. It is only supported on
// Linux.
func MemlockLimit() (cur, max uint64, err error) {
	return 0, 0, fmt.Errorf("getrlimit RLIMIT_MEMLOCK: %w", ErrNotSupported)
}

//go:build !linux

package sys

import "fmt"

// AllowedCPUs returns the CPUs this process may run on. It is only
// supported on Linux.
func AllowedCPUs() ([]int, error) {
	return nil, fmt.Errorf("sched_getaffinity: %w", ErrNotSupported)
}

//go:build !linux

package sys

import "fmt"

// TotalMemory returns the host's physical memory. It is only supported on
// Linux.
func TotalMemory() (uint64, error) {
	return 0, fmt.Errorf("sysinfo: %w", ErrNotSupported)
}

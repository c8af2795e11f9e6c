//go:build !linux

package sys

import "fmt"

// MemNode returns the NUMA node of the page that holds b's first byte. It
// is only supported on Linux.
func MemNode(b []byte) (int, error) {
	return -1, fmt.Errorf("get_mempolicy: %w", ErrNotSupported)
}

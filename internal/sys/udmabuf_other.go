//go:build !linux

package sys

import "fmt"

// Udmabuf makes a DMA-BUF of host memory. It is only supported on Linux.
func Udmabuf(name string, n int) (dmabuf int, mem []byte, err error) {
	return -1, nil, fmt.Errorf("udmabuf: %w", ErrNotSupported)
}

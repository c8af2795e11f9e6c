//go:build !linux

package sys

import (
	"errors"
	"syscall"
)

// TCPMoved reports errors.ErrUnsupported here: the kernel's TCP_INFO
// counters it reads are Linux's.
func TCPMoved(rc syscall.RawConn) (uint64, error) { return 0, errors.ErrUnsupported }

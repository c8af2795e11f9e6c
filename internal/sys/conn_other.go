//go:build !linux

package sys

import "syscall"

// TryWrite makes no attempt on this platform: callers fall back to a
// blocking write from another goroutine.
func TryWrite(rc syscall.RawConn, b []byte) (int, error) { return 0, nil }

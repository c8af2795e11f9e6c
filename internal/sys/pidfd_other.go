//go:build !linux

package sys

// PidfdOpen is not supported on this platform.
func PidfdOpen(pid int) (int, error) { return -1, ErrNotSupported }

// PidfdGetfd is not supported on this platform.
func PidfdGetfd(pidfd, targetfd int) (int, error) { return -1, ErrNotSupported }

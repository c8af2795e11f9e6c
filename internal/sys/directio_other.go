//go:build !linux

package sys

import "fmt"

// OpenDirect is only supported on Linux.
func OpenDirect(path string, perm uint32) (fd int, direct bool, err error) {
	return -1, false, fmt.Errorf("open %s with O_DIRECT: %w", path, ErrNotSupported)
}

// Pwritev is only supported on Linux.
func Pwritev(fd int, iov [][]byte, off int64) (int, error) { return 0, ErrNotSupported }

// Preadv is only supported on Linux.
func Preadv(fd int, iov [][]byte, off int64) (int, error) { return 0, ErrNotSupported }

// Pread is only supported on Linux.
func Pread(fd int, b []byte, off int64) (int, error) { return 0, ErrNotSupported }

// Pwrite is only supported on Linux.
func Pwrite(fd int, b []byte, off int64) (int, error) { return 0, ErrNotSupported }

// Preallocate is only supported on Linux.
func Preallocate(fd int, size int64) error { return ErrNotSupported }

// FileSpace is only supported on Linux.
func FileSpace(fd int) (allocated, free int64, err error) { return 0, 0, ErrNotSupported }

// LockFile is only supported on Linux.
func LockFile(fd int) error { return ErrNotSupported }

// SeekData is only supported on Linux.
func SeekData(fd int, off int64) (int64, bool, error) { return 0, false, ErrNotSupported }

// Fchmod is only supported on Linux.
func Fchmod(fd int, mode uint32) error { return ErrNotSupported }

//go:build !linux

package sys

import (
	"fmt"
	"os"
)

// PageSize returns the size of a base page in bytes.
func PageSize() int { return os.Getpagesize() }

// MmapAnon maps anonymous memory. It is only supported on Linux.
func MmapAnon(size int, hugeTLB bool) ([]byte, error) {
	return nil, fmt.Errorf("mmap %d bytes: %w", size, ErrNotSupported)
}

// MemfdCreate creates an anonymous file. It is only supported on Linux.
func MemfdCreate(name string, hugeTLB bool) (fd int, err error) {
	return -1, fmt.Errorf("memfd_create %q: %w", name, ErrNotSupported)
}

// Ftruncate sets the size of a file. It is only supported on Linux.
func Ftruncate(fd int, size int64) error {
	return fmt.Errorf("ftruncate fd %d to %d bytes: %w", fd, size, ErrNotSupported)
}

// SealSize seals the size of a memfd. It is only supported on Linux.
func SealSize(fd int) error {
	return fmt.Errorf("seal the size of memfd %d: %w", fd, ErrNotSupported)
}

// SealWrites seals a memfd against writes. It is only supported on Linux.
func SealWrites(fd int) error {
	return fmt.Errorf("seal memfd %d against writes: %w", fd, ErrNotSupported)
}

// MmapShared maps a file. It is only supported on Linux.
func MmapShared(fd, size int) ([]byte, error) {
	return nil, fmt.Errorf("mmap fd %d, %d bytes: %w", fd, size, ErrNotSupported)
}

// MmapSharedReadOnly maps a file read-only. It is only supported on Linux.
func MmapSharedReadOnly(fd, size int) ([]byte, error) {
	return nil, fmt.Errorf("mmap fd %d read-only, %d bytes: %w", fd, size, ErrNotSupported)
}

// ReopenReadOnly opens a file again, read-only. It is only supported on
// Linux.
func ReopenReadOnly(fd int) (int, error) {
	return -1, fmt.Errorf("reopen fd %d read-only: %w", fd, ErrNotSupported)
}

// Munmap unmaps memory. It is only supported on Linux.
func Munmap(b []byte) error {
	return fmt.Errorf("munmap %d bytes: %w", len(b), ErrNotSupported)
}

// Close closes a file descriptor. It is only supported on Linux.
func Close(fd int) error {
	return fmt.Errorf("close fd %d: %w", fd, ErrNotSupported)
}

// MadviseHugepage asks for transparent huge pages. It is only supported on
// Linux.
func MadviseHugepage(b []byte) error {
	return fmt.Errorf("madvise MADV_HUGEPAGE %d bytes: %w", len(b), ErrNotSupported)
}

// THPMode returns "": transparent huge pages are a Linux feature.
func THPMode() string { return "" }

// ShmemTHPMode returns "": transparent huge pages are a Linux feature.
func ShmemTHPMode() string { return "" }

// HugeTLBPages reports the explicit huge page pool. It is only supported on
// Linux.
func HugeTLBPages() (HugeTLB, error) {
	return HugeTLB{}, fmt.Errorf("huge page pool: %w", ErrNotSupported)
}

// FileSize is only supported on Linux.
func FileSize(fd int) (int64, error) {
	return 0, fmt.Errorf("fstat fd %d: %w", fd, ErrNotSupported)
}

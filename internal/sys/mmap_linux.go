package sys

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PageSize returns the size of a base page in bytes.
func PageSize() int { return unix.Getpagesize() }

// MmapAnon maps size bytes of private, anonymous, zero-filled memory that
// can be read and written. With hugeTLB the mapping uses MAP_HUGETLB, which
// takes explicit huge pages of the default size from the kernel's reserved
// pool; size should then be a multiple of that page size. Release the memory
// with [Munmap].
func MmapAnon(size int, hugeTLB bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	op := "mmap"
	if hugeTLB {
		flags |= unix.MAP_HUGETLB
		op = "mmap MAP_HUGETLB"
	}
	if size <= 0 {
		return nil, fmt.Errorf("%s %d bytes: %w", op, size, unix.EINVAL)
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, fmt.Errorf("%s %d bytes: %w", op, size, err)
	}
	return b, nil
}

// MemfdCreate creates an anonymous file with memfd_create(2) and returns its
// descriptor, opened close-on-exec. name only labels the file in
// /proc/PID/fd. With hugeTLB the file is backed by explicit huge pages
// (MFD_HUGETLB). The file is empty: size it with [Ftruncate], map it with
// [MmapShared] and release it with [Close]. It takes seals
// (MFD_ALLOW_SEALING): [SealSize] and [SealWrites].
func MemfdCreate(name string, hugeTLB bool) (fd int, err error) {
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	if hugeTLB {
		flags |= unix.MFD_HUGETLB
	}
	fd, err = unix.MemfdCreate(name, flags)
	if err != nil {
		if hugeTLB {
			return -1, fmt.Errorf("memfd_create %q MFD_HUGETLB: %w", name, err)
		}
		return -1, fmt.Errorf("memfd_create %q: %w", name, err)
	}
	return fd, nil
}

// SealSize seals the size of the memfd fd (F_SEAL_SHRINK and
// F_SEAL_GROW): from then on no one, through any descriptor of the file,
// however opened, can truncate it, which would make every mapping of the
// pages past the new end fault (SIGBUS) in every process that maps them.
func SealSize(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		return fmt.Errorf("seal the size of memfd %d: %w", fd, err)
	}
	return nil
}

// SealWrites seals the memfd fd against every new way to write it
// (F_SEAL_FUTURE_WRITE, Linux 5.1), and against later seals
// (F_SEAL_SEAL): from then on no one, through any descriptor of the file,
// however opened (one taken with pidfd_getfd, one opened again through
// /proc/PID/fd, root's), can map it writable (mmap and mprotect fail with
// EPERM or EACCES), write(2) it or punch holes in it. Mappings that were
// writable before keep writing: the owner's own. Nothing removes a seal.
func SealWrites(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_FUTURE_WRITE|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("seal memfd %d against writes: %w", fd, err)
	}
	return nil
}

// Ftruncate sets the size of the file behind fd to size bytes.
func Ftruncate(fd int, size int64) error {
	if err := unix.Ftruncate(fd, size); err != nil {
		return fmt.Errorf("ftruncate fd %d to %d bytes: %w", fd, size, err)
	}
	return nil
}

// MmapShared maps the first size bytes of the file behind fd, readable and
// writable, with MAP_SHARED: stores are visible to every other mapping of
// the same file, in this process or another. Release the memory with
// [Munmap]; the mapping stays valid after fd is closed.
func MmapShared(fd, size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("mmap fd %d, %d bytes: %w", fd, size, unix.EINVAL)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap fd %d, %d bytes: %w", fd, size, err)
	}
	return b, nil
}

// MmapSharedReadOnly maps the first size bytes of the file behind fd
// read-only, with MAP_SHARED: a store into the mapping faults, and the
// kernel refuses to make it writable (mprotect) when fd was opened
// read-only (see [ReopenReadOnly]).
func MmapSharedReadOnly(fd, size int) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("mmap fd %d read-only, %d bytes: %w", fd, size, unix.EINVAL)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap fd %d read-only, %d bytes: %w", fd, size, err)
	}
	return b, nil
}

// ReopenReadOnly opens the file behind fd again, read-only, through
// /proc/self/fd: a new descriptor of the same file whose holder cannot map
// it writable (mmap PROT_WRITE with MAP_SHARED fails with EACCES) nor write
// to it. That holds for the descriptor only: its holder may open the file
// again writable through /proc/self/fd, as this function opened it, where
// the file's mode allows (a memfd's is 0777). Only a seal ([SealWrites])
// stops that. Close it with [Close].
func ReopenReadOnly(fd int) (int, error) {
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reopen fd %d read-only: %w", fd, err)
	}
	return ro, nil
}

// Munmap unmaps memory returned by [MmapAnon] or [MmapShared]. b must be the
// slice those functions returned, not a part of it.
func Munmap(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap %d bytes: %w", len(b), err)
	}
	return nil
}

// Close closes the file descriptor fd.
func Close(fd int) error {
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close fd %d: %w", fd, err)
	}
	return nil
}

// MadviseHugepage asks the kernel to back b with transparent huge pages
// (MADV_HUGEPAGE). Whether it does depends on [THPMode] for private memory
// and [ShmemTHPMode] for shared memory. It fails with EINVAL on kernels
// built without transparent huge pages.
func MadviseHugepage(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil {
		return fmt.Errorf("madvise MADV_HUGEPAGE %d bytes: %w", len(b), err)
	}
	return nil
}

// THPMode returns the kernel's transparent huge page policy for private
// memory: "always", "madvise" or "never", or "" when it cannot be read.
func THPMode() string {
	return thpMode("/sys/kernel/mm/transparent_hugepage/enabled")
}

// ShmemTHPMode returns the kernel's transparent huge page policy for shared
// memory (memfd, tmpfs): "always", "within_size", "advise", "never", "deny"
// or "force", or "" when it cannot be read.
func ShmemTHPMode() string {
	return thpMode("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
}

func thpMode(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return bracketed(string(b))
}

// bracketed returns the word in square brackets in a sysfs choice list such
// as "always [madvise] never", or "" when there is none.
func bracketed(s string) string {
	_, rest, ok := strings.Cut(s, "[")
	if !ok {
		return ""
	}
	word, _, ok := strings.Cut(rest, "]")
	if !ok {
		return ""
	}
	return word
}

// HugeTLBPages reports the explicit huge page pool as /proc/meminfo shows
// it. It fails when the kernel has no hugetlbfs support.
func HugeTLBPages() (HugeTLB, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return HugeTLB{}, fmt.Errorf("huge page pool: %w", err)
	}
	return parseMeminfo(b)
}

func parseMeminfo(b []byte) (HugeTLB, error) {
	var h HugeTLB
	var seen int
	fields := []struct {
		key  string
		dst  *int
		unit int
	}{
		{"HugePages_Total:", &h.Total, 1},
		{"HugePages_Free:", &h.Free, 1},
		{"HugePages_Rsvd:", &h.Reserved, 1},
		{"Hugepagesize:", &h.PageSize, 1024}, // reported in kB
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		words := bytes.Fields(sc.Bytes())
		if len(words) < 2 {
			continue
		}
		for i, f := range fields {
			if string(words[0]) != f.key {
				continue
			}
			n, err := strconv.Atoi(string(words[1]))
			if err != nil {
				return HugeTLB{}, fmt.Errorf("huge page pool: /proc/meminfo: %s %q: %w", f.key, words[1], err)
			}
			*f.dst = n * f.unit
			seen |= 1 << i
		}
	}
	if seen != 1<<len(fields)-1 {
		return HugeTLB{}, errors.New("huge page pool: /proc/meminfo has no HugePages_* lines (kernel without hugetlbfs?)")
	}
	return h, nil
}

// FileSize returns the size in bytes of the file behind fd (fstat).
func FileSize(fd int) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fstat fd %d: %w", fd, err)
	}
	return st.Size, nil
}

package sys

import (
	"errors"

	"golang.org/x/sys/unix"
)

// The file I/O of the KV server's disk tier (kv/disktier): a file opened
// with O_DIRECT, written and read at offsets with vectors of aligned
// buffers, preallocated, and locked against a second process.

// OpenDirect opens (creating with perm) the file at path for reading and
// writing with O_DIRECT; direct is false when the file system refuses
// O_DIRECT (tmpfs), and the file is then opened without it.
func OpenDirect(path string, perm uint32) (fd int, direct bool, err error) {
	fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_DIRECT, perm)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, perm)
		return fd, false, err
	}
	return fd, err == nil, err
}

// Pwritev writes the buffers of iov at off (pwritev(2)).
func Pwritev(fd int, iov [][]byte, off int64) (int, error) { return unix.Pwritev(fd, iov, off) }

// Preadv reads into the buffers of iov from off (preadv(2)).
func Preadv(fd int, iov [][]byte, off int64) (int, error) { return unix.Preadv(fd, iov, off) }

// Pread reads into b from off.
func Pread(fd int, b []byte, off int64) (int, error) { return unix.Pread(fd, b, off) }

// Pwrite writes b at off.
func Pwrite(fd int, b []byte, off int64) (int, error) { return unix.Pwrite(fd, b, off) }

// Preallocate gives the file size bytes, allocated on disk (fallocate(2));
// where the file system cannot, it sets the size only. A disk without the
// room fails with ENOSPC.
func Preallocate(fd int, size int64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size > size {
		if err := unix.Ftruncate(fd, size); err != nil {
			return err
		}
	}
	err := unix.Fallocate(fd, 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return unix.Ftruncate(fd, size)
	}
	return err
}

// FileSpace returns the bytes of the file's allocated blocks and the bytes
// free for an unprivileged user on its file system.
func FileSpace(fd int) (allocated, free int64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, err
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return 0, 0, err
	}
	return st.Blocks * 512, int64(fs.Bavail) * fs.Bsize, nil
}

// LockFile takes the file's exclusive lock (flock(2)) without waiting:
// EWOULDBLOCK when another open file holds it.
func LockFile(fd int) error { return unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) }

// SeekData returns the first offset at or after off where the file has
// data (lseek(2) SEEK_DATA): preallocated blocks never written count as a
// hole on ext4 and XFS. more is false when there is no data after off. A
// file system without SEEK_DATA reports all of the file as data: off.
func SeekData(fd int, off int64) (next int64, more bool, err error) {
	next, err = unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return 0, false, nil
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
		return off, true, nil
	}
	return next, err == nil, err
}

// Fchmod sets the file's mode.
func Fchmod(fd int, mode uint32) error { return unix.Fchmod(fd, mode) }

package sys

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PidfdOpen returns a pidfd for process pid.
func PidfdOpen(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return fd, nil
}

// PidfdGetfd duplicates file descriptor targetfd of the process behind
// pidfd into this process (close-on-exec). The kernel allows it only where
// ptrace would be allowed (same user, or CAP_SYS_PTRACE; Yama permitting).
func PidfdGetfd(pidfd, targetfd int) (int, error) {
	fd, err := unix.PidfdGetfd(pidfd, targetfd, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_getfd fd %d: %w", targetfd, err)
	}
	return fd, nil
}

package sys

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// TotalMemory returns the host's physical memory in bytes (sysinfo(2)).
func TotalMemory() (uint64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("sysinfo: %w", err)
	}
	return uint64(si.Totalram) * uint64(si.Unit), nil
}

package cuda

import "strings"

// DriverFD reports whether a file descriptor whose target (as
// /proc/self/fd shows it) is target may be one that the CUDA driver
// keeps open for the life of the process: its device files (/dev/nvidia*)
// and, once it is initialised, the eventfds, pipes and sockets it opens
// for its own threads, which outlive every context. It is false in a
// process where the NVIDIA driver was never initialised (a stand-in
// driver keeps nothing open), so that a test binary's descriptor check
// stays strict on a machine without a GPU.
func DriverFD(target string) bool {
	if !realDriverLoaded() {
		return false
	}
	return strings.HasPrefix(target, "/dev/nvidia") || target == "anon_inode:[eventfd]" ||
		strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:")
}

package sys

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// get_mempolicy flags (linux/mempolicy.h).
const (
	mpolFNode = 1 << 0 // return the node, not the policy
	mpolFAddr = 1 << 1 // of the page at addr
)

// MemNode returns the NUMA node of the page that holds b's first byte
// (get_mempolicy with MPOL_F_NODE|MPOL_F_ADDR), where the kernel placed
// it, or where it would place it when it has not been touched yet.
func MemNode(b []byte) (int, error) {
	if len(b) == 0 {
		return -1, fmt.Errorf("get_mempolicy: %w: no memory", ErrNotSupported)
	}
	var node int32
	_, _, errno := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&node)), 0, 0,
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), mpolFNode|mpolFAddr, 0)
	if errno != 0 {
		return -1, fmt.Errorf("get_mempolicy: %w", errno)
	}
	return int(node), nil
}

package sys

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetCongestion sets the TCP congestion control algorithm of the socket
// behind rc (TCP_CONGESTION). Its errors say what the kernel has and
// allows: ErrNoAlgorithm when it has no algorithm of that name,
// ErrAlgorithmNotAllowed when this process may not choose it.
func SetCongestion(rc syscall.RawConn, name string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	switch {
	case serr == nil:
		return nil
	case errors.Is(serr, unix.ENOENT):
		return fmt.Errorf("congestion control %q: %w (available: %s)", name, ErrNoAlgorithm, congestionList("available"))
	case errors.Is(serr, unix.EPERM):
		return fmt.Errorf("congestion control %q: %w (allowed: %s; net.ipv4.tcp_allowed_congestion_control lists them, or give the process CAP_NET_ADMIN)",
			name, ErrAlgorithmNotAllowed, congestionList("allowed"))
	default:
		return fmt.Errorf("congestion control %q: %w", name, os.NewSyscallError("setsockopt TCP_CONGESTION", serr))
	}
}

// Congestion returns the TCP congestion control algorithm of the socket
// behind rc.
func Congestion(rc syscall.RawConn) (string, error) {
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	if gerr != nil {
		return "", os.NewSyscallError("getsockopt TCP_CONGESTION", gerr)
	}
	return strings.TrimRight(name, "\x00"), nil
}

// DefaultCongestion returns the system's default TCP congestion control
// (net.ipv4.tcp_congestion_control).
func DefaultCongestion() (string, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// congestionList returns net.ipv4.tcp_WHICH_congestion_control, or a
// question mark where it cannot be read.
func congestionList(which string) string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_" + which + "_congestion_control")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

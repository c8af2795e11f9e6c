package sys

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// TCPMoved returns how many bytes the peer has acknowledged on the TCP
// socket behind rc plus how many it has received from the peer (the
// kernel's tcpi_bytes_acked and tcpi_bytes_received, Linux 4.2 and
// later). The sum grows while the peer takes or sends data, and stops
// when it stops doing both: a peer that is stopped or hung stops
// acknowledging once its receive buffer is full. One getsockopt; it never
// blocks.
func TCPMoved(rc syscall.RawConn) (uint64, error) {
	var info *unix.TCPInfo
	var serr error
	err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("getsockopt TCP_INFO: %w", err)
	}
	return info.Bytes_acked + info.Bytes_received, nil
}

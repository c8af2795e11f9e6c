package sys

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// TryWrite makes one non-blocking write attempt of b on the socket behind rc.
// It returns how many bytes were written; 0 with a nil error means the socket
// buffer is full. It never waits.
func TryWrite(rc syscall.RawConn, b []byte) (int, error) {
	var n int
	var werr error
	err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Write(int(fd), b)
			if errors.Is(werr, unix.EINTR) {
				continue
			}
			if errors.Is(werr, unix.EAGAIN) {
				n, werr = 0, nil
			}
			return true
		}
	})
	if err != nil {
		return 0, err
	}
	if n < 0 {
		n = 0
	}
	return n, werr
}

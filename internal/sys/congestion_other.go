//go:build !linux

package sys

import (
	"errors"
	"syscall"
)

// SetCongestion reports errors.ErrUnsupported: only Linux lets a socket
// choose its congestion control here.
func SetCongestion(rc syscall.RawConn, name string) error { return errors.ErrUnsupported }

// Congestion reports errors.ErrUnsupported.
func Congestion(rc syscall.RawConn) (string, error) { return "", errors.ErrUnsupported }

// DefaultCongestion reports errors.ErrUnsupported.
func DefaultCongestion() (string, error) { return "", errors.ErrUnsupported }

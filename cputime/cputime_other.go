//go:build !linux

package cputime

import (
	"fmt"
	"time"
)

var errNotLinux = fmt.Errorf("CPU time is measured on Linux only: %w", ErrNotSupported)

// Self returns the user and system CPU time this process has used.
func Self() (time.Duration, error) { return 0, errNotLinux }

// Process returns the user and system CPU time process pid has used.
func Process(pid int) (time.Duration, error) { return 0, errNotLinux }

//go:build !linux

package main

import (
	"errors"
	"time"
)

var errCPUNotSupported = errors.New("CPU time is measured on Linux only")

func selfCPU() (time.Duration, error) { return 0, errCPUNotSupported }

func processCPU(pid int) (time.Duration, error) { return 0, errCPUNotSupported }

//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no such signal;
// bench still stops the serve process on every path it controls.
func setParentDeathSignal(*exec.Cmd) {}

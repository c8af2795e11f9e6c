package cputime

import "time"

// Meter reads the CPU time used by this process and, when PID is not 0, by
// process PID too: bench's own and that of the serve process it started.
type Meter struct{ PID int }

// Read returns the CPU time so far; ok is false where it cannot be
// measured (off Linux, or the process is gone).
func (m Meter) Read() (d time.Duration, ok bool) {
	self, err := Self()
	if err != nil {
		return 0, false
	}
	if m.PID == 0 {
		return self, true
	}
	other, err := Process(m.PID)
	if err != nil {
		return 0, false
	}
	return self + other, true
}

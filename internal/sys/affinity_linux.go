package sys

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AllowedCPUs returns the CPUs this process may run on (sched_getaffinity
// of the calling thread), in increasing order.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

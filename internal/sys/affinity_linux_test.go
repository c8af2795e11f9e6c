package sys

import (
	"runtime"
	"testing"
)

// The process may run on at least one CPU, and on no more than the host has.
func TestAllowedCPUs(t *testing.T) {
	cpus, err := AllowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) != runtime.NumCPU() {
		t.Fatalf("allowed CPUs %v; NumCPU %d", cpus, runtime.NumCPU())
	}
	for i := 1; i < len(cpus); i++ {
		if cpus[i] <= cpus[i-1] {
			t.Fatalf("allowed CPUs %v not increasing", cpus)
		}
	}
}

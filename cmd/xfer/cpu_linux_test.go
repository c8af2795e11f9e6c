package main

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// The command name may contain spaces and parentheses.
	stat := "4242 (xfer (serve) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 75 0 0 20 0 9 0 12345 0 0\n"
	got, err := parseProcStat([]byte(stat), 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2250 * time.Millisecond; got != want {
		t.Errorf("got %v, want %v (utime 150 + stime 75 ticks at 100 Hz)", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x y 0"} {
		if _, err := parseProcStat([]byte(bad), 100); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestProcessCPUSelf(t *testing.T) {
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if hz := clockTicks(); hz <= 0 {
		t.Errorf("clock ticks = %d", hz)
	}
}

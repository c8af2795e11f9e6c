package cputime

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
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x y 0", "1 (x) S 1 2 3 4 5 6 7 8 9 10 -1 2 0", "1 (x) S 1 2 3 4 5 6 7 8 9 10 9223372036854775807 1 0"} {
		if _, err := parseProcStat([]byte(bad), 100); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestProcessCPUSelf(t *testing.T) {
	if _, err := Process(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if hz := clockTicks(); hz <= 0 {
		t.Errorf("clock ticks = %d", hz)
	}
}

// FuzzParseProcStat: the /proc/<pid>/stat decoder never panics, and what
// it accepts is a CPU time of zero or more.
func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("4242 (xfer (serve) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 75 0 0 20 0 9 0 12345 0 0\n"))
	f.Add([]byte("1 (x) S 1 2 3 4 5 6 7 8 9 10 -1 2 0"))
	f.Add([]byte("1 (x) S 1 2 3 4 5 6 7 8 9 10 9223372036854775807 1 0"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseProcStat(b, 100)
		if err == nil && d < 0 {
			t.Fatalf("parseProcStat(%q) = %v < 0", b, d)
		}
		if err != nil && d != 0 {
			t.Fatalf("parseProcStat(%q) = %v with error %v", b, d, err)
		}
	})
}

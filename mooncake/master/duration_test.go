package master

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParseDuration reads mooncake_master's duration flags' forms: plain
// milliseconds, and ms, s, m, h in any case, with white space around.
func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"500":              500 * time.Millisecond,
		"0":                0,
		"10000":            10 * time.Second,
		" 250ms ":          250 * time.Millisecond,
		"10s":              10 * time.Second,
		"10 S":             10 * time.Second,
		"3m":               3 * time.Minute,
		"2H":               2 * time.Hour,
		"0009223372036854": 9223372036854 * time.Millisecond,
	} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "  ", "ms", "-1", "1.5s", "10d", "10us", "1 0", "s10", "18446744073709551616", "9223372036855ms", "2562048h"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzParseDuration checks that any input parses to a non-negative
// duration or fails, never panics, and that a parsed one reads back the
// same written in milliseconds.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"500", "10s", " 3 m ", "1h", "x", "", "99999999999999999999", "7MS"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error with a newline: %q", err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v", s, d)
		}
		back, err := ParseDuration(strconv.FormatInt(d.Milliseconds(), 10))
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, but %dms reads %v, %v", s, d, d.Milliseconds(), back, err)
		}
	})
}

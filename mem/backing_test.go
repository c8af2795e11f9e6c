package mem

import (
	"strings"
	"testing"
)

func TestParseBacking(t *testing.T) {
	for in, want := range map[string]Backing{"": BackingAuto, " MemFD ": BackingMemfd, "private": BackingPrivate, "cuda:1": "cuda:1"} {
		if got, err := ParseBacking(in); err != nil || got != want {
			t.Errorf("ParseBacking(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseBacking("host"); err == nil || !strings.Contains(err.Error(), "cuda:N") {
		t.Errorf("host: %v", err)
	}
	var b Backing
	if err := b.UnmarshalText([]byte("disk")); err == nil || strings.Contains(err.Error(), "disk") {
		t.Errorf("UnmarshalText leaves the value to its caller: %v", err)
	}
	if text, err := Backing("").MarshalText(); err != nil || string(text) != "auto" {
		t.Errorf("MarshalText of the zero Backing: %q, %v", text, err)
	}
}

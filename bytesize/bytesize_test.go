package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"64", 64},
		{"0", 0},
		{"64B", 64},
		{"4KiB", 4096},
		{"4K", 4096},
		{"4k", 4096},
		{"4kib", 4096},
		{" 4 KiB ", 4096},
		{"1MiB", 1 << 20},
		{"1M", 1 << 20},
		{"16MiB", 16 << 20},
		{"1GiB", 1 << 30},
		{"2T", 2 << 40},
		{"1.5KiB", 1536},
		{"0.5K", 512},
		{"1.25MiB", 5 << 18},
		{"8.0", 8},
		{"8388607TiB", 8388607 << 40},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"  ", "empty"},
		{"1.3", "whole number"},
		{"1.0001KiB", "whole number"},
		{"4KB", `unknown unit "KB"`},
		{"4MB", "unknown unit"},
		{"4Q", "unknown unit"},
		{"-1", "not a number"},
		{"K", "not a number"},
		{".5K", "not a number"},
		{"5.K", "not a number"},
		{"1.2.3", "not a number"},
		{"1e3", "unknown unit"},
		{"8388608TiB", "too large"},
		{"99999999999999999999", "too large"},
		{strings.Repeat("9", 100), "too long"},
	} {
		got, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("Parse(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.why)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("64,4KiB, 1MiB ,16MiB")
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{64, 4096, 1 << 20, 16 << 20}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}

	for _, tc := range []struct{ in, want string }{
		{"64,4KB,1MiB", `element 2: size "4KB"`},
		{"64,,1MiB", "element 2"},
		{"64,1.5", `element 2: size "1.5"`},
		{"", "empty"},
	} {
		if _, err := ParseList(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseList(%q) error = %v, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{64, "64B"},
		{1536, "1536B"},
		{4096, "4KiB"},
		{1 << 20, "1MiB"},
		{16 << 20, "16MiB"},
		{3 << 30, "3GiB"},
		{5 << 40, "5TiB"},
		{(1 << 40) + 1024, "1073741825KiB"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParse checks that Parse never panics, never returns a
// negative size, and that what it accepts survives Format.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"64", "4KiB", "4k", "1.5KiB", "16MiB", "1GiB", "1.3", "", "-1", "1e3", "8388607TiB", "0.0009765625K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("Parse(%q) = %d with error %v", s, n, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d < 0", s, n)
		}
		back, err := Parse(Format(n))
		if err != nil || back != n {
			t.Fatalf("Parse(Format(%d)) = %d, %v (Format %q, input %q)", n, back, err, Format(n), s)
		}
	})
}

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{512, "512 B"},
		{-512, "-512 B"},
		{1 << 10, "1 KiB"},
		{1536, "1.50 KiB"},
		{64 << 20, "64 MiB"},
		{179026929120, "166.73 GiB"},
		{3 << 40, "3 TiB"},
		{-(2 << 20), "-2 MiB"},
	} {
		if got := Human(tc.in); got != tc.want {
			t.Errorf("Human(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

package verbs

import "testing"

// A rejoin request names a rail that can come back (1 to n-1) after the
// magic byte; anything else is a clear error.
func TestParseRejoin(t *testing.T) {
	for _, c := range []struct {
		b    [2]byte
		n    int
		want int
		ok   bool
	}{
		{[2]byte{rejoinMagic, 1}, 2, 1, true},
		{[2]byte{rejoinMagic, 3}, 4, 3, true},
		{[2]byte{rejoinMagic, 0}, 4, 0, false}, // rail 0 never comes back: it is the connection
		{[2]byte{rejoinMagic, 4}, 4, 0, false},
		{[2]byte{0, 1}, 4, 0, false},
	} {
		got, err := parseRejoin(c.b, c.n)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseRejoin(%x, %d) = %d, %v; want %d, ok %v", c.b, c.n, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseRejoin(f *testing.F) {
	f.Add(byte(rejoinMagic), byte(1), 2)
	f.Fuzz(func(t *testing.T, a, b byte, n int) {
		n = n%20 + 1
		if n < 1 {
			n = -n + 1
		}
		i, err := parseRejoin([2]byte{a, b}, n)
		if err == nil && (i < 1 || i >= n) {
			t.Fatalf("parseRejoin(%x %x, %d) = rail %d", a, b, n, i)
		}
	})
}

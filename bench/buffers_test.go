package bench

import (
	"bytes"
	"testing"
)

// TestPopulate: every page of a buffer holds the pattern, none reads as
// zeros, whatever the length.
func TestPopulate(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3 << 20} {
		b := make([]byte, n)
		Populate(b)
		for off := 0; off < n; off += 4096 {
			page := b[off:min(off+4096, n)]
			if bytes.Count(page, []byte{0}) == len(page) {
				t.Fatalf("%d bytes: the page at %d is all zeros", n, off)
			}
		}
		if n > 4096 && !bytes.Equal(b[n-100:], b[(n-100)%4096:(n-100)%4096+100]) {
			t.Fatalf("%d bytes: the tail does not repeat the first page", n)
		}
	}
}

package shm

import (
	"bytes"
	"testing"
)

// TestCopyMem: every size copies exactly its bytes, whole or in pieces,
// and nothing past them.
func TestCopyMem(t *testing.T) {
	max := temporalMax()
	for _, n := range []int{0, 1, 4096, 2*temporalPiece - 1, 2 * temporalPiece, 2*temporalPiece + 1,
		3*temporalPiece + 12345, max, max + 1, max + temporalPiece + 7} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + i>>16)
		}
		dst := make([]byte, n+64)
		for i := range dst {
			dst[i] = 0xEE
		}
		copyMem(dst[:n], src)
		if !bytes.Equal(dst[:n], src) {
			t.Fatalf("%d bytes: copy differs", n)
		}
		if bytes.Count(dst[n:], []byte{0xEE}) != 64 {
			t.Fatalf("%d bytes: bytes past the copy were touched", n)
		}
	}
	if max < 2*temporalPiece {
		t.Fatalf("temporalMax %d: below two pieces", max)
	}
}

func TestParseCacheSize(t *testing.T) {
	for in, want := range map[string]int{
		"32768K\n": 32 << 20, "2M": 2 << 20, "1G": 1 << 30, "512": 512,
		"": 0, "K": 0, "-1K": 0, "12Q": 0, "99999999999999G": 0,
	} {
		if got := parseCacheSize(in); got != want {
			t.Errorf("parseCacheSize(%q) = %d, want %d", in, got, want)
		}
	}
}

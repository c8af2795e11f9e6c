package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// patternSeed derives the seed of the pattern for one operation, so that no
// two operations of a run, nor two workers, nor two sizes, write the same
// bytes: stale data is caught as surely as corrupt data.
func patternSeed(size int64, op uint64, worker int) uint64 {
	return mix64(uint64(size)*0x9e3779b97f4a7c15 ^ op*0xbf58476d1ce4e5b9 ^ uint64(worker+1)*0x94d049bb133111eb)
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// fillPattern fills b with a pseudo-random stream determined by seed.
func fillPattern(b []byte, seed uint64) {
	x := seed
	for len(b) >= 8 {
		x = x*6364136223846793005 + 1442695040888963407
		binary.LittleEndian.PutUint64(b, x^x>>29)
		b = b[8:]
	}
	x = x*6364136223846793005 + 1442695040888963407
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
}

// mismatchError is a verification failure: the bytes that came back are not
// the bytes that were written.
type mismatchError struct {
	Op       string
	Size     int64
	Worker   int
	Count    uint64 // the worker's operation number
	Offset   int
	Want     byte
	Got      byte
	Mismatch int // bytes that differ
}

func (e *mismatchError) Error() string {
	return fmt.Sprintf("verify failed: %s of %d bytes (worker %d, op %d): first mismatch at offset %d: want %#02x, got %#02x (%d of %d bytes differ)",
		e.Op, e.Size, e.Worker, e.Count, e.Offset, e.Want, e.Got, e.Mismatch, e.Size)
}

// compare returns the offset of the first byte where got differs from want
// and how many bytes differ, or -1 and 0.
func compare(want, got []byte) (first, n int) {
	if bytes.Equal(want, got) {
		return -1, 0
	}
	first = -1
	for i := range want {
		if i >= len(got) || want[i] != got[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	return first, n
}

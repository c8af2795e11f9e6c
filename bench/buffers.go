package bench

import (
	"fmt"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
)

// Populate writes a pattern into every page of b. Memory that was mapped
// and never written reads as the kernel's one shared page of zeros: a
// WRITE from it, or a READ from a target's, would copy from a page that
// sits in the CPU's cache, and measure a cache instead of memory. So the
// buffers a benchmark sends from, and the region xfer serve exports, hold
// real pages, as an application's data does.
func Populate(b []byte) {
	fillPattern(b[:min(len(b), 4096)], 1) // the first page, then copies of it
	for n := 4096; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// AllocBuffers allocates n buffers of size bytes from e's pool; they live
// until e is closed.
func AllocBuffers(e *xfer.Engine, n int, size int64, poolMB int) ([][]byte, error) {
	bufs := make([][]byte, n)
	for i := range bufs {
		b, err := e.Alloc(int(size))
		if err != nil {
			return nil, fmt.Errorf("allocate buffer %d of %s from the %d MiB pool: %w (raise --memory-mb)", i+1, bytesize.Format(size), poolMB, err)
		}
		bufs[i] = b.Bytes()[:size]
	}
	return bufs, nil
}

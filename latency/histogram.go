package latency

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Max is the largest latency a histogram tells apart: longer ones are
// recorded as Max.
const Max = time.Minute

// digits is the histogram's precision in significant decimal digits.
const digits = 3

// Histogram is an HDR histogram of latencies. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type Histogram struct{ h *hdrhistogram.Histogram }

// New returns an empty histogram whose counts are allocated already, so
// that not even its first record allocates: for a timed loop.
func New() *Histogram {
	h := new(Histogram)
	h.counts()
	return h
}

// counts returns the histogram's counts, allocated on first use.
func (h *Histogram) counts() *hdrhistogram.Histogram {
	if h.h == nil {
		h.h = hdrhistogram.New(1, int64(Max), digits)
	}
	return h.h
}

// Record adds one latency, clamped to 1 ns..Max.
func (h *Histogram) Record(d time.Duration) { h.RecordN(d, 1) }

// RecordN adds n latencies that each took d; n <= 0 adds none.
func (h *Histogram) RecordN(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	v := min(max(int64(d), 1), int64(Max))
	_ = h.counts().RecordValues(v, int64(n)) // cannot fail: v is in range
}

// Merge adds o's latencies to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.h != nil {
		h.counts().Merge(o.h)
	}
}

// Reset forgets every latency, keeping the counts' memory.
func (h *Histogram) Reset() {
	if h.h != nil {
		h.h.Reset()
	}
}

// Count returns how many latencies were recorded.
func (h *Histogram) Count() int64 {
	if h.h == nil {
		return 0
	}
	return h.h.TotalCount()
}

// Quantile returns the latency at q percent (0 < q <= 100); 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.ValueAtQuantile(q))
}

// Max returns the largest latency recorded; 0 when empty.
func (h *Histogram) Max() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.Max())
}

// Mean returns the mean latency; 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.Mean())
}

// Summary is a histogram's count and percentiles.
type Summary struct {
	Count          int64
	Mean, Max      time.Duration
	P50, P99, P999 time.Duration
}

// Summary returns the count, mean, maximum and the 50th, 99th and 99.9th
// percentiles; all zero when empty.
func (h *Histogram) Summary() Summary {
	if h.Count() == 0 {
		return Summary{}
	}
	return Summary{
		Count: h.Count(),
		Mean:  h.Mean(),
		Max:   h.Max(),
		P50:   h.Quantile(50),
		P99:   h.Quantile(99),
		P999:  h.Quantile(99.9),
	}
}

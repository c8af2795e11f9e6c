package pages

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// histogram records fetch latencies in an HDR histogram (three significant
// digits, 1 ns to a minute). A fetch takes the lock for one record, some
// tens of nanoseconds against microseconds of fetch.
type histogram struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

const maxLatency = time.Minute

func (h *histogram) record(d time.Duration) { h.recordN(d, 1) }

// recordN records n fetches that each took d, under one lock.
func (h *histogram) recordN(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	v := min(max(int64(d), 1), int64(maxLatency))
	h.mu.Lock()
	if h.h == nil {
		h.h = hdrhistogram.New(1, int64(maxLatency), 3)
	}
	_ = h.h.RecordValues(v, int64(n)) // cannot fail: v is in range
	h.mu.Unlock()
}

// Latency summarizes recorded fetch latencies.
type Latency struct {
	Count          int64
	Mean, Max      time.Duration
	P50, P99, P999 time.Duration
}

func (h *histogram) snapshot() Latency {
	h.mu.Lock()
	defer h.mu.Unlock()
	return summarize(h.h)
}

// mergeInto adds h's records to dst.
func (h *histogram) mergeInto(dst *hdrhistogram.Histogram) {
	h.mu.Lock()
	if h.h != nil {
		dst.Merge(h.h)
	}
	h.mu.Unlock()
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		Mean:  time.Duration(h.Mean()),
		Max:   time.Duration(h.Max()),
		P50:   time.Duration(h.ValueAtQuantile(50)),
		P99:   time.Duration(h.ValueAtQuantile(99)),
		P999:  time.Duration(h.ValueAtQuantile(99.9)),
	}
}

func (h *histogram) reset() {
	h.mu.Lock()
	if h.h != nil {
		h.h.Reset()
	}
	h.mu.Unlock()
}

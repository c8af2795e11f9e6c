package latency

import (
	"sync"
	"time"
)

// Locked is a Histogram behind a mutex, safe for concurrent use. The zero
// value is empty and ready to use; a Locked must not be copied after first
// use.
type Locked struct {
	mu sync.Mutex
	h  Histogram
}

// Record adds one latency, clamped to 1 ns..Max.
func (l *Locked) Record(d time.Duration) { l.RecordN(d, 1) }

// RecordN adds n latencies that each took d, under one lock.
func (l *Locked) RecordN(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.h.RecordN(d, n)
	l.mu.Unlock()
}

// Merge adds src's latencies to l. It locks l, then src: callers that
// merge both ways between two Lockeds must not do so concurrently.
func (l *Locked) Merge(src *Locked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	src.AddTo(&l.h)
}

// AddTo adds l's latencies to dst, which the caller owns.
func (l *Locked) AddTo(dst *Histogram) {
	l.mu.Lock()
	dst.Merge(&l.h)
	l.mu.Unlock()
}

// Summary returns the count and percentiles of l's latencies.
func (l *Locked) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.Summary()
}

// Reset forgets every latency.
func (l *Locked) Reset() {
	l.mu.Lock()
	l.h.Reset()
	l.mu.Unlock()
}

package main

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in nanoseconds, from 1ns to maxLatency, with three
// significant digits.
const (
	maxLatency = time.Minute
	latencySig = 3
)

// latencies is a histogram of operation latencies. Each worker records into
// its own and the results are merged, so the hot path takes no lock.
type latencies struct{ h *hdrhistogram.Histogram }

func newLatencies() latencies {
	return latencies{hdrhistogram.New(1, int64(maxLatency), latencySig)}
}

// record adds one latency, clamped to the histogram's range.
func (l latencies) record(d time.Duration) {
	v := min(max(int64(d), 1), int64(maxLatency))
	_ = l.h.RecordValue(v) // cannot fail: v is in range
}

// merge adds o's counts to l.
func (l latencies) merge(o latencies) { l.h.Merge(o.h) }

func (l latencies) reset() { l.h.Reset() }

func (l latencies) count() int64 { return l.h.TotalCount() }

// quantile returns the latency at q percent (0 < q <= 100); 0 when empty.
func (l latencies) quantile(q float64) time.Duration {
	if l.count() == 0 {
		return 0
	}
	return time.Duration(l.h.ValueAtQuantile(q))
}

func (l latencies) max() time.Duration {
	if l.count() == 0 {
		return 0
	}
	return time.Duration(l.h.Max())
}

// sizeResult is the outcome of one message size.
type sizeResult struct {
	Transport string
	Op        string
	Size      int64
	Ops       int64
	Elapsed   time.Duration
	P50, P99  time.Duration
	Max       time.Duration
	// CPU is the CPU time both processes spent during the run (only this
	// one when the peer is external); CPUKnown is false where it cannot be
	// measured.
	CPU      time.Duration
	CPUKnown bool
	Verified bool
}

// newSizeResult summarises a run of ops operations of size bytes.
func newSizeResult(op string, size, ops int64, elapsed time.Duration, lat latencies) sizeResult {
	return sizeResult{
		Op:      op,
		Size:    size,
		Ops:     ops,
		Elapsed: elapsed,
		P50:     lat.quantile(50),
		P99:     lat.quantile(99),
		Max:     lat.max(),
	}
}

// Bytes is the payload moved.
func (r sizeResult) Bytes() int64 { return r.Ops * r.Size }

// BytesPerSec is the payload bandwidth.
func (r sizeResult) BytesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes()) / r.Elapsed.Seconds()
}

// CPUPerGB is CPU seconds per 1e9 payload bytes; ok is false when CPU time
// is unknown or nothing was moved.
func (r sizeResult) CPUPerGB() (v float64, ok bool) {
	if !r.CPUKnown || r.Bytes() == 0 {
		return 0, false
	}
	return r.CPU.Seconds() / (float64(r.Bytes()) / 1e9), true
}

package bench

import (
	"time"

	"github.com/xferio/xfer/latency"
)

// Result is the outcome of one message size.
type Result struct {
	Transport string
	Op        string
	Size      int64
	Ops       int64
	Elapsed   time.Duration
	P50, P99  time.Duration
	P999      time.Duration // the 99.9th percentile
	Max       time.Duration
	// CPU is the CPU time both processes spent during the run (only this
	// one when the peer is external); CPUKnown is false where it cannot be
	// measured.
	CPU      time.Duration
	CPUKnown bool
	Verified bool
}

// newResult summarises a run of ops operations of size bytes.
func newResult(op string, size, ops int64, elapsed time.Duration, lat *latency.Histogram) Result {
	return Result{
		Op:      op,
		Size:    size,
		Ops:     ops,
		Elapsed: elapsed,
		P50:     lat.Quantile(50),
		P99:     lat.Quantile(99),
		P999:    lat.Quantile(99.9),
		Max:     lat.Max(),
	}
}

// Bytes is the payload moved.
func (r Result) Bytes() int64 { return r.Ops * r.Size }

// BytesPerSec is the payload bandwidth.
func (r Result) BytesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes()) / r.Elapsed.Seconds()
}

// CPUPerGB is CPU seconds per 1e9 payload bytes; ok is false when CPU time
// is unknown or nothing was moved.
func (r Result) CPUPerGB() (v float64, ok bool) {
	if !r.CPUKnown || r.Bytes() == 0 {
		return 0, false
	}
	return r.CPU.Seconds() / (float64(r.Bytes()) / 1e9), true
}

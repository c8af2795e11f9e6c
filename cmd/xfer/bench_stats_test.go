package main

import (
	"math"
	"testing"
	"time"
)

func TestLatencyPercentiles(t *testing.T) {
	l := newLatencies()
	// 1µs .. 100µs, one each: p50 is 50µs, p99 99µs, max 100µs.
	for i := 1; i <= 100; i++ {
		l.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		name      string
		got, want time.Duration
	}{
		{"p50", l.quantile(50), 50 * time.Microsecond},
		{"p99", l.quantile(99), 99 * time.Microsecond},
		{"max", l.max(), 100 * time.Microsecond},
	} {
		// Three significant digits: within 0.1%.
		if d := math.Abs(float64(tc.got - tc.want)); d > float64(tc.want)/1000 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if l.count() != 100 {
		t.Errorf("count = %d, want 100", l.count())
	}
}

func TestLatencyMergeResetClamp(t *testing.T) {
	a, b := newLatencies(), newLatencies()
	a.record(10 * time.Microsecond)
	b.record(20 * time.Microsecond)
	b.record(-5)        // clamped to 1ns
	b.record(time.Hour) // clamped to maxLatency
	a.merge(b)
	if a.count() != 4 {
		t.Fatalf("merged count = %d, want 4", a.count())
	}
	if m := a.max(); m < maxLatency-maxLatency/1000 {
		t.Errorf("max = %v, want about %v", m, maxLatency)
	}
	a.reset()
	if a.count() != 0 || a.quantile(50) != 0 || a.max() != 0 {
		t.Errorf("after reset: count %d p50 %v max %v", a.count(), a.quantile(50), a.max())
	}
}

func TestSizeResult(t *testing.T) {
	r := sizeResult{Size: 1 << 20, Ops: 1000, Elapsed: 500 * time.Millisecond, CPU: 200 * time.Millisecond, CPUKnown: true}
	if got, want := r.BytesPerSec(), float64(1000<<20)*2; got != want {
		t.Errorf("BytesPerSec = %v, want %v", got, want)
	}
	v, ok := r.CPUPerGB()
	if want := 0.2 / (float64(1000<<20) / 1e9); !ok || math.Abs(v-want) > 1e-12 {
		t.Errorf("CPUPerGB = %v, %v; want %v", v, ok, want)
	}
	r.CPUKnown = false
	if _, ok := r.CPUPerGB(); ok {
		t.Error("CPUPerGB ok without a CPU measurement")
	}
	if (sizeResult{}).BytesPerSec() != 0 {
		t.Error("BytesPerSec of nothing is not 0")
	}
}

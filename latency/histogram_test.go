package latency

import (
	"math"
	"sync"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var l Histogram
	// 1µs .. 100µs, one each: p50 is 50µs, p99 99µs, max 100µs.
	for i := 1; i <= 100; i++ {
		l.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		name      string
		got, want time.Duration
	}{
		{"p50", l.Quantile(50), 50 * time.Microsecond},
		{"p99", l.Quantile(99), 99 * time.Microsecond},
		{"max", l.Max(), 100 * time.Microsecond},
	} {
		// Three significant digits: within 0.1%.
		if d := math.Abs(float64(tc.got - tc.want)); d > float64(tc.want)/1000 {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if l.Count() != 100 {
		t.Errorf("count = %d, want 100", l.Count())
	}
}

func TestMergeResetClamp(t *testing.T) {
	var a, b Histogram
	a.Record(10 * time.Microsecond)
	b.Record(20 * time.Microsecond)
	b.Record(-5)        // clamped to 1ns
	b.Record(time.Hour) // clamped to Max
	a.Merge(&b)
	if a.Count() != 4 {
		t.Fatalf("merged count = %d, want 4", a.Count())
	}
	if m := a.Max(); m < Max-Max/1000 {
		t.Errorf("max = %v, want about %v", m, Max)
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(50) != 0 || a.Max() != 0 {
		t.Errorf("after reset: count %d p50 %v max %v", a.Count(), a.Quantile(50), a.Max())
	}
}

// TestSummary: the summary of an empty histogram is all zero; of 1..1000
// µs it has the percentiles within the three digits' precision.
func TestSummary(t *testing.T) {
	var h Histogram
	if s := h.Summary(); s != (Summary{}) {
		t.Fatalf("empty: %+v", s)
	}
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	s := h.Summary()
	within := func(got, want time.Duration) bool { return got >= want*999/1000 && got <= want*1001/1000 }
	if s.Count != 1000 || !within(s.P50, 500*time.Microsecond) || !within(s.P99, 990*time.Microsecond) ||
		!within(s.P999, 999*time.Microsecond) || !within(s.Max, time.Millisecond) || !within(s.Mean, 500500*time.Nanosecond) {
		t.Fatalf("%+v: want p50 500 µs, p99 990 µs, p99.9 999 µs, max 1 ms, mean 500.5 µs", s)
	}
}

// TestRecordAllocs: once in use, recording allocates nothing; New's
// histogram does not allocate even on its first record.
func TestRecordAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(1, func() { New().Record(time.Millisecond) }) - testing.AllocsPerRun(1, func() { New() }); n > 0 {
		t.Errorf("the first record into New's histogram allocates %v times", n)
	}
	var h Histogram
	var l Locked
	if n := testing.AllocsPerRun(1000, func() {
		h.Record(42 * time.Microsecond)
		l.RecordN(7*time.Millisecond, 3)
	}); n > 0 {
		t.Errorf("a record allocates %v times", n)
	}
}

// TestLocked: recorders on several goroutines lose no latency, and a
// Locked merges into another and into a Histogram.
func TestLocked(t *testing.T) {
	var l Locked
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				l.Record(time.Duration(g+1) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	if s := l.Summary(); s.Count != 8000 || s.Max < 8*time.Microsecond-8 || s.Max > 8*time.Microsecond+8 {
		t.Fatalf("8 goroutines of 1000 records: %+v", s)
	}
	var other Locked
	other.RecordN(time.Second, 2)
	other.RecordN(time.Second, 0)
	l.Merge(&other)
	var all Histogram
	l.AddTo(&all)
	if all.Count() != 8002 || all.Max() < time.Second-time.Millisecond {
		t.Fatalf("merged: %d latencies, max %v; want 8002, 1 s", all.Count(), all.Max())
	}
	l.Reset()
	if s := l.Summary(); s != (Summary{}) {
		t.Fatalf("after reset: %+v", s)
	}
}

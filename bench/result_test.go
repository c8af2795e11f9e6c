package bench

import (
	"math"
	"testing"
	"time"
)

func TestSizeResult(t *testing.T) {
	r := Result{Size: 1 << 20, Ops: 1000, Elapsed: 500 * time.Millisecond, CPU: 200 * time.Millisecond, CPUKnown: true}
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
	if (Result{}).BytesPerSec() != 0 {
		t.Error("BytesPerSec of nothing is not 0")
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/bench"
)

func TestBenchPlan(t *testing.T) {
	ok := benchFlags{op: bench.OpWrite, sizes: defaultSizes, duration: 2 * time.Second, depth: 4}
	p, err := ok.plan(false)
	if err != nil {
		t.Fatal(err)
	}
	if p.maxSize != 16<<20 || len(p.sizes) != 5 || p.lim != (bench.Limit{Dur: 2 * time.Second}) {
		t.Errorf("plan %+v", p)
	}
	withIters := ok
	withIters.iters = 200
	if p, err := withIters.plan(true); err != nil || p.lim != (bench.Limit{Iters: 200}) {
		t.Errorf("--iters 200: plan %+v, %v", p, err)
	}

	for _, tc := range []struct {
		change   func(*benchFlags)
		itersSet bool
		want     string
	}{
		{func(f *benchFlags) { f.op = "copy" }, false, `--op "copy"`},
		{func(f *benchFlags) { f.op, f.verify = bench.OpSend, true }, false, "--verify works with write and read"},
		{func(f *benchFlags) { f.sizes = "64,4KB" }, false, `--size: size list element 2: size "4KB"`},
		{func(f *benchFlags) { f.sizes = "0" }, false, "at least 1 byte"},
		{func(f *benchFlags) { f.depth = 0 }, false, "--depth 0"},
		{func(f *benchFlags) { f.depth = maxDepth + 1 }, false, "--depth"},
		{func(f *benchFlags) { f.iters = 0 }, true, "--iters 0"},
		{func(f *benchFlags) { f.duration = 0 }, false, "--duration 0s"},
		{func(f *benchFlags) { f.plot = "out.jpg" }, false, ".png or .svg"},
	} {
		f := ok
		tc.change(&f)
		if _, err := f.plan(tc.itersSet); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", f, err, tc.want)
		}
	}
}

func TestDefaultPoolMB(t *testing.T) {
	for _, tc := range []struct {
		depth int
		size  int64
		want  int
	}{
		{1, 64, minPoolMB},
		{4, 16 << 20, 128},
		{16, 10<<20 + 1, 321}, // 2 × 16 × (10MiB + 4KiB) = 320.125MiB
	} {
		if got := defaultPoolMB(tc.depth, tc.size); got != tc.want {
			t.Errorf("defaultPoolMB(%d, %d) = %d, want %d", tc.depth, tc.size, got, tc.want)
		}
	}
}

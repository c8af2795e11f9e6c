package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// memPeer is an in-memory stand-in for a peer's region, for the runner's
// own logic: counting, limits and verification. It can corrupt one byte of
// every read, or drop writes, which the real engine cannot be made to do.
// The end-to-end tests run the runner against real engines.
type memPeer struct {
	mu      sync.Mutex
	region  []byte
	desc    xfer.RegionDesc
	corrupt int  // flip this byte of every read when >= 0
	drop    bool // writes do nothing
	sends   atomic.Int64
}

func newMemPeer(size int) *memPeer {
	return &memPeer{region: make([]byte, size), desc: xfer.RegionDesc{ID: 7, Addr: 0x10000, Len: uint64(size), Key: 42}, corrupt: -1}
}

func (m *memPeer) span(a xfer.RemoteAddr, n int) ([]byte, error) {
	off := a.Addr - m.desc.Addr
	if a.Region != m.desc.ID || a.Key != m.desc.Key || a.Addr < m.desc.Addr || off+uint64(n) > m.desc.Len {
		return nil, fmt.Errorf("%+v len %d: %w", a, n, xfer.ErrRemoteAccess)
	}
	return m.region[off : off+uint64(n)], nil
}

func (m *memPeer) Write(_ context.Context, src []byte, dst xfer.RemoteAddr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.span(dst, len(src))
	if err == nil && !m.drop {
		copy(b, src)
	}
	return err
}

func (m *memPeer) Read(_ context.Context, dst []byte, src xfer.RemoteAddr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.span(src, len(dst))
	if err == nil {
		copy(dst, b)
		if m.corrupt >= 0 && m.corrupt < len(dst) {
			dst[m.corrupt] ^= 0x10
		}
	}
	return err
}

func (m *memPeer) Send(context.Context, []byte) error {
	m.sends.Add(1)
	return nil
}

func buffers(n int, size int64) [][]byte {
	b := make([][]byte, n)
	for i := range b {
		b[i] = make([]byte, size)
	}
	return b
}

func newTestRunner(m *memPeer, op string, depth int, maxSize int64, verify bool) *runner {
	var checks [][]byte
	if verify {
		checks = buffers(depth, maxSize)
	}
	return newRunner(m, op, m.desc, buffers(depth, maxSize), checks)
}

func TestRunnerIters(t *testing.T) {
	for _, op := range []string{opWrite, opRead, opSend} {
		m := newMemPeer(4 * 8192)
		r := newTestRunner(m, op, 4, 8192, op != opSend)
		for _, size := range []int64{1, 100, 4096, 8192} {
			ops, elapsed, lat, err := r.run(context.Background(), size, limit{iters: 333})
			if err != nil {
				t.Fatalf("%s %d: %v", op, size, err)
			}
			if ops != 333 || lat.Count() != 333 || r.completed() != 333 {
				t.Errorf("%s %d: ops %d, latencies %d, completed %d; want 333", op, size, ops, lat.Count(), r.completed())
			}
			if elapsed <= 0 || lat.Quantile(50) <= 0 {
				t.Errorf("%s %d: elapsed %v, p50 %v", op, size, elapsed, lat.Quantile(50))
			}
		}
	}
}

func TestRunnerDuration(t *testing.T) {
	r := newTestRunner(newMemPeer(2*4096), opWrite, 2, 4096, false)
	start := time.Now()
	ops, elapsed, _, err := r.run(context.Background(), 4096, limit{dur: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if ops == 0 || elapsed < 50*time.Millisecond || time.Since(start) > 5*time.Second {
		t.Errorf("ops %d in %v", ops, elapsed)
	}
}

func TestRunnerSlots(t *testing.T) {
	// Each worker writes its own slot: with verification on, workers that
	// overlapped would corrupt each other's data.
	m := newMemPeer(int(8 * slotStride(5000)))
	r := newTestRunner(m, opWrite, 8, 5000, true)
	if _, _, _, err := r.run(context.Background(), 5000, limit{iters: 800}); err != nil {
		t.Fatal(err)
	}
	// And a region too small for the slots is refused by the target. (Every
	// slot is out of range: with one slot missing, the worker that owns it
	// may, under the race detector, get no operation of the 800 at all.)
	m = newMemPeer(4096)
	r = newTestRunner(m, opWrite, 8, 5000, false)
	if _, _, _, err := r.run(context.Background(), 5000, limit{iters: 800}); !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Errorf("err = %v, want ErrRemoteAccess", err)
	}
}

func TestRunnerVerifyMismatch(t *testing.T) {
	for _, op := range []string{opWrite, opRead} {
		m := newMemPeer(2 * 4096)
		m.corrupt = 1234
		r := newTestRunner(m, op, 2, 4096, true)
		_, _, _, err := r.run(context.Background(), 4096, limit{iters: 100})
		var me *mismatchError
		if !errors.As(err, &me) {
			t.Fatalf("%s: err = %v, want a mismatch", op, err)
		}
		if me.Offset != 1234 || me.Mismatch != 1 || me.Want^me.Got != 0x10 {
			t.Errorf("%s: %+v", op, me)
		}
		if !strings.Contains(err.Error(), "first mismatch at offset 1234") {
			t.Errorf("%s: message %q", op, err)
		}
	}
}

func TestRunnerVerifyDroppedWrite(t *testing.T) {
	m := newMemPeer(4096)
	r := newTestRunner(m, opWrite, 1, 4096, true)
	if _, _, _, err := r.run(context.Background(), 4096, limit{iters: 10}); err != nil {
		t.Fatal(err)
	}
	// From now on writes are lost: the read-back returns the last run's
	// data, which must not pass for this run's.
	m.drop = true
	var me *mismatchError
	if _, _, _, err := r.run(context.Background(), 4096, limit{iters: 10}); !errors.As(err, &me) {
		t.Fatalf("err = %v, want a mismatch", err)
	}
	// Reads of a slot that was never rewritten fail the same way.
	r = newTestRunner(m, opRead, 1, 4096, true)
	if _, _, _, err := r.run(context.Background(), 4096, limit{iters: 10}); !errors.As(err, &me) {
		t.Fatalf("read: err = %v, want a mismatch", err)
	}
}

func TestRunnerCancel(t *testing.T) {
	r := newTestRunner(newMemPeer(4096), opWrite, 1, 4096, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := r.run(ctx, 4096, limit{dur: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestPatternsDiffer(t *testing.T) {
	a, b := make([]byte, 37), make([]byte, 37)
	seeds := []uint64{patternSeed(64, 0, 0), patternSeed(64, 1, 0), patternSeed(64, 0, 1), patternSeed(128, 0, 0)}
	for i := range seeds {
		for j := range i {
			fillPattern(a, seeds[i])
			fillPattern(b, seeds[j])
			if off, _ := compare(a, b); off < 0 {
				t.Errorf("seeds %d and %d give the same pattern", i, j)
			}
		}
	}
	fillPattern(a, 99)
	fillPattern(b, 99)
	if off, n := compare(a, b); off != -1 || n != 0 {
		t.Errorf("same seed: compare = %d, %d", off, n)
	}
}

func TestBenchPlan(t *testing.T) {
	ok := benchFlags{op: opWrite, sizes: defaultSizes, duration: 2 * time.Second, depth: 4}
	p, err := ok.plan(false)
	if err != nil {
		t.Fatal(err)
	}
	if p.maxSize != 16<<20 || len(p.sizes) != 5 || p.lim != (limit{dur: 2 * time.Second}) {
		t.Errorf("plan %+v", p)
	}
	withIters := ok
	withIters.iters = 200
	if p, err := withIters.plan(true); err != nil || p.lim != (limit{iters: 200}) {
		t.Errorf("--iters 200: plan %+v, %v", p, err)
	}

	for _, tc := range []struct {
		change   func(*benchFlags)
		itersSet bool
		want     string
	}{
		{func(f *benchFlags) { f.op = "copy" }, false, `--op "copy"`},
		{func(f *benchFlags) { f.op, f.verify = opSend, true }, false, "--verify works with write and read"},
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

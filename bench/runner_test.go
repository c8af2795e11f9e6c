package bench

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

func newTestRunner(m *memPeer, op string, depth int, maxSize int64, verify bool) *Runner {
	var checks [][]byte
	if verify {
		checks = buffers(depth, maxSize)
	}
	return NewRunner(m, op, m.desc, buffers(depth, maxSize), checks)
}

func TestRunnerIters(t *testing.T) {
	for _, op := range []string{OpWrite, OpRead, OpSend} {
		m := newMemPeer(4 * 8192)
		r := newTestRunner(m, op, 4, 8192, op != OpSend)
		for _, size := range []int64{1, 100, 4096, 8192} {
			ops, elapsed, lat, err := r.Run(context.Background(), size, Limit{Iters: 333})
			if err != nil {
				t.Fatalf("%s %d: %v", op, size, err)
			}
			if ops != 333 || lat.Count() != 333 || r.Completed() != 333 {
				t.Errorf("%s %d: ops %d, latencies %d, completed %d; want 333", op, size, ops, lat.Count(), r.Completed())
			}
			if elapsed <= 0 || lat.Quantile(50) <= 0 {
				t.Errorf("%s %d: elapsed %v, p50 %v", op, size, elapsed, lat.Quantile(50))
			}
		}
	}
}

func TestRunnerDuration(t *testing.T) {
	r := newTestRunner(newMemPeer(2*4096), OpWrite, 2, 4096, false)
	start := time.Now()
	ops, elapsed, _, err := r.Run(context.Background(), 4096, Limit{Dur: 50 * time.Millisecond})
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
	m := newMemPeer(int(8 * SlotStride(5000)))
	r := newTestRunner(m, OpWrite, 8, 5000, true)
	if _, _, _, err := r.Run(context.Background(), 5000, Limit{Iters: 800}); err != nil {
		t.Fatal(err)
	}
	// And a region too small for the slots is refused by the target. (Every
	// slot is out of range: with one slot missing, the worker that owns it
	// may, under the race detector, get no operation of the 800 at all.)
	m = newMemPeer(4096)
	r = newTestRunner(m, OpWrite, 8, 5000, false)
	if _, _, _, err := r.Run(context.Background(), 5000, Limit{Iters: 800}); !errors.Is(err, xfer.ErrRemoteAccess) {
		t.Errorf("err = %v, want ErrRemoteAccess", err)
	}
}

func TestRunnerVerifyMismatch(t *testing.T) {
	for _, op := range []string{OpWrite, OpRead} {
		m := newMemPeer(2 * 4096)
		m.corrupt = 1234
		r := newTestRunner(m, op, 2, 4096, true)
		_, _, _, err := r.Run(context.Background(), 4096, Limit{Iters: 100})
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
	r := newTestRunner(m, OpWrite, 1, 4096, true)
	if _, _, _, err := r.Run(context.Background(), 4096, Limit{Iters: 10}); err != nil {
		t.Fatal(err)
	}
	// From now on writes are lost: the read-back returns the last run's
	// data, which must not pass for this run's.
	m.drop = true
	var me *mismatchError
	if _, _, _, err := r.Run(context.Background(), 4096, Limit{Iters: 10}); !errors.As(err, &me) {
		t.Fatalf("err = %v, want a mismatch", err)
	}
	// Reads of a slot that was never rewritten fail the same way.
	r = newTestRunner(m, OpRead, 1, 4096, true)
	if _, _, _, err := r.Run(context.Background(), 4096, Limit{Iters: 10}); !errors.As(err, &me) {
		t.Fatalf("read: err = %v, want a mismatch", err)
	}
}

func TestRunnerCancel(t *testing.T) {
	r := newTestRunner(newMemPeer(4096), OpWrite, 1, 4096, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := r.Run(ctx, 4096, Limit{Dur: time.Hour}); !errors.Is(err, context.Canceled) {
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

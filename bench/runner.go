package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/cputime"
	"github.com/xferio/xfer/latency"
)

// Transferer is the part of *xfer.Peer the benchmark drives.
type Transferer interface {
	Write(ctx context.Context, src []byte, dst xfer.RemoteAddr) error
	Read(ctx context.Context, dst []byte, src xfer.RemoteAddr) error
	Send(ctx context.Context, msg []byte) error
}

var _ Transferer = (*xfer.Peer)(nil)

// The operations a Runner can measure.
const (
	OpWrite = "write"
	OpRead  = "read"
	OpSend  = "send"
)

// SlotAlign aligns each worker's slot in the remote region.
const SlotAlign = 4096

// SlotStride is the distance between two workers' slots for size bytes.
func SlotStride(size int64) int64 { return (size + SlotAlign - 1) &^ (SlotAlign - 1) }

// readVerifyRound is how many verified reads share one pattern before the
// worker writes a new one into its slot.
const readVerifyRound = 16

// Limit ends a run: after Iters operations in all, or when Dur has passed
// if Iters is 0.
type Limit struct {
	Iters int64
	Dur   time.Duration
}

// Runner runs one operation with several in flight: worker w owns local
// buffer bufs[w] (and checks[w] when verifying) and the slot at offset
// w*SlotStride(size) of the remote region, and does one synchronous
// operation after another. Each worker records latencies into its own
// histogram; they are merged when the run ends.
type Runner struct {
	peer   Transferer
	op     string
	remote xfer.RegionDesc
	bufs   [][]byte
	checks [][]byte // nil unless verify
	verify bool
	// With buffers in GPU memory, patterns are made and checked in host
	// memory (hbufs, hchecks, per worker) and moved by copyDev.
	copyDev        func(dst, src []byte) error
	hbufs, hchecks [][]byte

	lats  []*latency.Histogram // per worker, reused from run to run
	round uint64               // counts runs, so that no two runs write the same patterns
	done  atomic.Int64
}

// NewRunner returns a Runner of op (OpWrite, OpRead or OpSend) on peer,
// into or from remote, with one worker per buffer of bufs; checks, when not
// nil, are the workers' buffers for verifying every operation (write and
// read only), as large as bufs'.
func NewRunner(peer Transferer, op string, remote xfer.RegionDesc, bufs, checks [][]byte) *Runner {
	r := &Runner{peer: peer, op: op, remote: remote, bufs: bufs, checks: checks, verify: checks != nil}
	for range bufs {
		r.lats = append(r.lats, latency.New())
	}
	return r
}

// OnDevice tells r that its buffers are GPU memory, which copy moves to and
// from host memory.
func (r *Runner) OnDevice(copy func(dst, src []byte) error, maxSize int64) {
	r.copyDev = copy
	if !r.verify {
		return
	}
	for range r.bufs {
		r.hbufs = append(r.hbufs, make([]byte, maxSize))
		r.hchecks = append(r.hchecks, make([]byte, maxSize))
	}
}

// fill fills worker w's buffer b with the pattern of seed.
func (r *Runner) fill(w int, b []byte, seed uint64) error {
	if r.copyDev == nil {
		fillPattern(b, seed)
		return nil
	}
	h := r.hbufs[w][:len(b)]
	fillPattern(h, seed)
	return r.copyDev(b, h)
}

// clear zeroes worker w's check buffer b.
func (r *Runner) clear(w int, b []byte) error {
	if r.copyDev == nil {
		clear(b)
		return nil
	}
	h := r.hchecks[w][:len(b)]
	clear(h)
	return r.copyDev(b, h)
}

// host returns worker w's buffer b as host memory: b itself, or a copy in
// scratch.
func (r *Runner) host(b, scratch []byte) ([]byte, error) {
	if r.copyDev == nil {
		return b, nil
	}
	h := scratch[:len(b)]
	return h, r.copyDev(h, b)
}

// Completed reports the operations finished so far in the current run.
func (r *Runner) Completed() int64 { return r.done.Load() }

// Run performs operations of size bytes until lim and returns how many were
// done, how long they took, and their latencies. The first error stops every
// worker and is returned.
func (r *Runner) Run(ctx context.Context, size int64, lim Limit) (ops int64, elapsed time.Duration, lat *latency.Histogram, err error) {
	r.round++
	r.done.Store(0)
	for _, l := range r.lats {
		l.Reset()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg      sync.WaitGroup
		claimed atomic.Int64
		start   = time.Now()
	)
	for w := range r.bufs {
		wg.Go(func() {
			if err := r.worker(ctx, w, size, lim, start, &claimed); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return 0, elapsed, nil, err
	}
	lat = latency.New()
	for _, l := range r.lats {
		lat.Merge(l)
	}
	return lat.Count(), elapsed, lat, nil
}

func (r *Runner) worker(ctx context.Context, w int, size int64, lim Limit, start time.Time, claimed *atomic.Int64) error {
	buf := r.bufs[w][:size]
	var check []byte
	if r.verify {
		check = r.checks[w][:size]
	}
	slot := r.remote.At(uint64(int64(w) * SlotStride(size)))
	lat := r.lats[w]
	for k := uint64(0); ; k++ {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		if lim.Iters > 0 {
			if claimed.Add(1) > lim.Iters {
				return nil
			}
		} else if time.Since(start) >= lim.Dur {
			return nil
		}
		if err := r.one(ctx, w, k, buf, check, slot, lat); err != nil {
			return err
		}
		r.done.Add(1)
	}
}

// one performs worker w's operation number k.
func (r *Runner) one(ctx context.Context, w int, k uint64, buf, check []byte, slot xfer.RemoteAddr, lat *latency.Histogram) error {
	size := int64(len(buf))
	seed := patternSeed(size, r.round<<40|k, w)
	switch r.op {
	case OpWrite:
		if r.verify {
			if err := r.fill(w, buf, seed); err != nil {
				return fmt.Errorf("verify: fill %d bytes: %w", size, err)
			}
		}
		t0 := time.Now()
		if err := r.peer.Write(ctx, buf, slot); err != nil {
			return fmt.Errorf("write %d bytes: %w", size, err)
		}
		lat.Record(time.Since(t0))
		if r.verify {
			// A read that does nothing must not pass.
			if err := r.clear(w, check); err != nil {
				return fmt.Errorf("verify: clear %d bytes: %w", size, err)
			}
			if err := r.peer.Read(ctx, check, slot); err != nil {
				return fmt.Errorf("verify: read back %d bytes: %w", size, err)
			}
			return r.compareHost(w, buf, check, k)
		}
	case OpRead:
		if r.verify {
			if k%readVerifyRound == 0 {
				if err := r.fill(w, check, seed); err != nil {
					return fmt.Errorf("verify: fill %d bytes: %w", size, err)
				}
				if err := r.peer.Write(ctx, check, slot); err != nil {
					return fmt.Errorf("verify: write pattern of %d bytes: %w", size, err)
				}
			}
			if err := r.clear(w, buf); err != nil {
				return fmt.Errorf("verify: clear %d bytes: %w", size, err)
			}
		}
		t0 := time.Now()
		if err := r.peer.Read(ctx, buf, slot); err != nil {
			return fmt.Errorf("read %d bytes: %w", size, err)
		}
		lat.Record(time.Since(t0))
		if r.verify {
			return r.compareHost(w, check, buf, k)
		}
	case OpSend:
		t0 := time.Now()
		if err := r.peer.Send(ctx, buf); err != nil {
			return fmt.Errorf("send %d bytes: %w", size, err)
		}
		lat.Record(time.Since(t0))
	default:
		return fmt.Errorf("unknown op %q", r.op)
	}
	return nil
}

// compareHost compares worker w's want and got, either in GPU memory.
func (r *Runner) compareHost(w int, want, got []byte, k uint64) error {
	if r.copyDev == nil {
		return r.compare(want, got, w, k)
	}
	hw, err := r.host(want, r.hbufs[w])
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	hg, err := r.host(got, r.hchecks[w])
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	return r.compare(hw, hg, w, k)
}

func (r *Runner) compare(want, got []byte, w int, k uint64) error {
	off, n := compare(want, got)
	if off < 0 {
		return nil
	}
	return &mismatchError{Op: r.op, Size: int64(len(want)), Worker: w, Count: k, Offset: off, Want: want[off], Got: got[off], Mismatch: n}
}

// WarmupOps operations run before each size's measurement, uncounted.
const WarmupOps = 50

// Progress displays a run while it lasts: desc names it, lim ends it and
// completed reports the operations done so far. It returns the function
// that removes the display.
type Progress func(desc string, lim Limit, completed func() int64) (hide func())

// Measure warms r up with WarmupOps operations, then runs operations of
// size bytes until lim and summarises them, with the CPU time that cpu
// meters. progress, when not nil, displays the run.
func (r *Runner) Measure(ctx context.Context, size int64, lim Limit, cpu cputime.Meter, progress Progress) (Result, error) {
	if _, _, _, err := r.Run(ctx, size, Limit{Iters: WarmupOps}); err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}
	cpu0, ok0 := cpu.Read()
	hide := func() {}
	if progress != nil {
		hide = progress(fmt.Sprintf("%s %s", r.op, bytesize.Format(size)), lim, r.Completed)
	}
	ops, elapsed, lat, err := r.Run(ctx, size, lim)
	hide()
	cpu1, ok1 := cpu.Read()
	if err != nil {
		return Result{}, err
	}
	res := newResult(r.op, size, ops, elapsed, lat)
	res.CPU, res.CPUKnown = cpu1-cpu0, ok0 && ok1
	res.Verified = r.verify // every operation was checked, or err is set
	return res, nil
}

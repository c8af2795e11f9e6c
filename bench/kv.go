package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/kv"
	"github.com/xferio/xfer/latency"
)

// KVResult is the outcome of a KV benchmark run: the line "kv bench
// --json" prints.
type KVResult struct {
	Op          string  `json:"op"`
	Transport   string  `json:"transport"`
	ValueSize   int64   `json:"size_bytes"`
	Concurrency int     `json:"concurrency"`
	Clients     int     `json:"clients"`
	Ops         int64   `json:"ops"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	LatP50Ns    int64   `json:"lat_p50_ns"`
	LatP99Ns    int64   `json:"lat_p99_ns"`
	LatP999Ns   int64   `json:"lat_p999_ns"`
	LatMaxNs    int64   `json:"lat_max_ns"`
	Verified    bool    `json:"verified"`
}

// KVStore is what the KV driver uses of a server (*kv.Client) or of a
// cluster of them (*kv.Cluster).
type KVStore interface {
	GetInto(ctx context.Context, key string, buf xfer.Buffer) (int, error)
	PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) error
	DeleteWith(ctx context.Context, key string, o kv.DeleteOptions) error
	Engine() *xfer.Engine
	Transport() string
}

var (
	_ KVStore = (*kv.Client)(nil)
	_ KVStore = (*kv.Cluster)(nil)
)

// distinct counts the different clients in cs.
func distinct(cs []KVStore) int {
	seen := make(map[KVStore]bool, len(cs))
	for _, c := range cs {
		seen[c] = true
	}
	return len(seen)
}

// kvValue is the value of key k: bytes derived from k, so GETs can be checked.
func kvValue(b []byte, k int) {
	for i := range b {
		b[i] = byte(k) ^ byte(i) ^ byte(i>>8)
	}
}

// benchChunk is how many operations a worker takes at a time.
const benchChunk = 16

// KVConfig is what a KV benchmark run does: Ops operations (Op, "get" or
// "put") on values of Size bytes under Keys keys named Prefix + a number.
type KVConfig struct {
	Op         string
	Size, Ops  int64
	Keys       int
	Prefix     string
	Keep       bool // leave the keys on the server
	AllowEvict bool // the keys may evict other values
	Verify     bool // check every GET's value
	// Stats returns the server's counters (a cluster's: the sums over its
	// servers), by which the run fits its keys into the free space.
	Stats func(context.Context) (kv.Stats, error)
	// Notes receives what the run says besides its result (fewer keys than
	// asked, keys left on the server), a line each. Default: nothing.
	Notes io.Writer
	// Progress, when set, displays the run.
	Progress Progress
}

// KV runs the KV benchmark bk with one worker per element of clients (the
// same client may serve several workers). It puts the keys first for a GET
// run, and deletes them at the end unless bk.Keep.
func KV(ctx context.Context, clients []KVStore, bk KVConfig) (rec KVResult, err error) {
	verify := bk.Verify
	notes := bk.Notes
	if notes == nil {
		notes = io.Discard
	}
	op, size, ops, keys := bk.Op, bk.Size, bk.Ops, bk.Keys
	type worker struct {
		c     KVStore
		buf   xfer.Buffer
		check []byte
		lat   *latency.Histogram
	}
	ws := make([]*worker, len(clients))
	for i, c := range clients {
		buf, err := c.Engine().Alloc(int(max(size, 1)))
		if err != nil {
			return KVResult{}, fmt.Errorf("client buffer: %w", err)
		}
		ws[i] = &worker{c: c, buf: buf, check: make([]byte, size), lat: latency.New()}
	}
	// The key names are made before the run, as redis-benchmark's are, so
	// that formatting them is not timed (up to a million of them; more are
	// formatted per operation).
	keyName := func(k int) string { return fmt.Sprintf("%s%012d", bk.Prefix, k) }
	names := make([]string, min(keys, 1<<20))
	for k := range names {
		names[k] = keyName(k)
	}
	key := func(k int) string {
		if k < len(names) {
			return names[k]
		}
		return keyName(k)
	}
	// The keys must fit the server's pool with room to spare, or evictions
	// would turn GETs into misses; and they must not evict the values
	// already there, unless --allow-evict.
	st, err := bk.Stats(ctx)
	if err != nil {
		return KVResult{}, err
	}
	per := uint64(max(size, 64))
	if fit := int(st.Capacity / 2 / per); keys > fit {
		fmt.Fprintf(notes, "xfer kv bench: %d keys of %s do not fit half the server's pool (%s): using %d\n", keys, bytesize.Format(size), bytesize.Human(int64(st.Capacity)), max(fit, 1))
		keys = max(fit, 1)
	}
	// Half the free space, as half the pool above: a PUT over a key holds
	// the old value and the new one until it completes.
	if free := st.Capacity - min(st.PoolUsed, st.Capacity); st.Keys > 0 && !bk.AllowEvict && uint64(keys)*per > free/2 {
		fit := int(free / 2 / per)
		if fit < 1 {
			return KVResult{}, fmt.Errorf("the server holds %d keys and has %s free, less than one %s value: the benchmark would evict your values (--allow-evict lets it)",
				st.Keys, bytesize.Human(int64(free)), bytesize.Format(size))
		}
		fmt.Fprintf(notes, "xfer kv bench: the server holds %d keys of yours and has %s free: using %d keys so that none is evicted (--allow-evict lets it use more)\n",
			st.Keys, bytesize.Human(int64(free)), fit)
		keys = fit
	}
	if !bk.Keep {
		defer func() {
			// Delete what the run wrote, also when it failed or was
			// interrupted, with a context of its own; not from a server
			// that stalled or is gone, which would only wait again.
			if errors.Is(err, xfer.ErrStalled) || errors.Is(err, kv.ErrUnavailable) {
				fmt.Fprintf(notes, "xfer kv bench: the benchmark's keys (%s*) are left on the server\n", bk.Prefix)
				return
			}
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for k := range keys {
				// Forced: the run's GETs leased them.
				if derr := clients[0].DeleteWith(dctx, key(k), kv.DeleteOptions{Force: true}); derr != nil && !errors.Is(derr, kv.ErrNotFound) {
					if err == nil {
						err = fmt.Errorf("deleting the benchmark's keys (%s*): %w", bk.Prefix, derr)
					}
					return
				}
			}
		}()
	}
	if op == "get" { // the keys must exist
		w := ws[0]
		for k := range keys {
			kvValue(w.buf.Bytes()[:size], k)
			if err := w.c.PutBuffer(ctx, key(k), w.buf, int(size)); err != nil {
				return KVResult{}, fmt.Errorf("fill: %w", err)
			}
		}
	}
	var next, done atomic.Int64
	one := func(ctx context.Context, w *worker, i int64) error {
		k := int(i % int64(keys))
		if op == "put" {
			t0 := time.Now()
			err := w.c.PutBuffer(ctx, key(k), w.buf, int(size))
			w.lat.Record(time.Since(t0))
			return err
		}
		t0 := time.Now()
		n, err := w.c.GetInto(ctx, key(k), w.buf)
		w.lat.Record(time.Since(t0))
		if err != nil {
			return err
		}
		if int64(n) != size {
			return fmt.Errorf("get %s: %d bytes, want %d", key(k), n, size)
		}
		if verify {
			kvValue(w.check, k)
			if !bytes.Equal(w.buf.Bytes()[:n], w.check) {
				return fmt.Errorf("get %s: the value differs from what was put", key(k))
			}
		}
		return nil
	}
	// A short warm-up, not measured.
	for i := range min(int64(len(ws))*10, ops) {
		if err := one(ctx, ws[i%int64(len(ws))], i); err != nil {
			return KVResult{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, w := range ws {
		w.lat.Reset()
	}
	hide := func() {}
	if bk.Progress != nil {
		hide = bk.Progress("kv "+op+" "+bytesize.Format(size), Limit{Iters: ops}, done.Load)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(ws))
	// The first worker that fails stops the others: a server that is gone
	// or stalled fails the run once, as soon as one worker learns it.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	for _, w := range ws {
		wg.Go(func() {
			// Workers take operations in chunks, and count them done
			// per chunk: two shared counters bumped by every operation
			// of 16 workers on 2 CPUs cost measurable time.
			for {
				first := next.Add(benchChunk) - benchChunk
				if first >= ops {
					return
				}
				last := min(first+benchChunk, ops)
				for i := first; i < last; i++ {
					if err := one(runCtx, w, i); err != nil {
						errs <- err
						stop()
						return
					}
				}
				done.Add(last - first)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	hide()
	close(errs)
	if err := <-errs; err != nil {
		return KVResult{}, err
	}
	lat := latency.New()
	for _, w := range ws {
		lat.Merge(w.lat)
		w.c.Engine().Free(w.buf)
	}
	sec := elapsed.Seconds()
	return KVResult{
		Op: op, Transport: clients[0].Transport(), ValueSize: size, Concurrency: len(clients), Clients: distinct(clients),
		Ops: ops, Seconds: sec, OpsPerSec: float64(ops) / sec, BytesPerSec: float64(ops*size) / sec,
		LatP50Ns: int64(lat.Quantile(50)), LatP99Ns: int64(lat.Quantile(99)), LatP999Ns: int64(lat.Quantile(99.9)), LatMaxNs: int64(lat.Max()),
		Verified: verify && op == "get",
	}, nil
}

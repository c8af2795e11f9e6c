package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/kv"
	"github.com/xferio/xfer/latency"
)

// kvBenchRecord is the line "kv bench --json" prints.
type kvBenchRecord struct {
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

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func newKVBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure GET or PUT throughput and latency against a KV server",
		Long: "bench runs --ops operations from --concurrency workers over --keys keys of --value-size\n" +
			"bytes, which it PUTs first for a GET run. It prints ops/s, bandwidth (1e9 bytes/s) and latency\n" +
			"p50/p99/p99.9.\n\n" +
			"Its keys start with a prefix of their own (--prefix) and are deleted at the end (--keep keeps\n" +
			"them). Against a server that holds other values it uses no more keys than fit the free space,\n" +
			"so that none of them is evicted (--allow-evict lifts that).\n\n" +
			"By default each worker is a client of its own, with its own connection and registered buffers,\n" +
			"like redis-benchmark -c. --clients N shares N clients among the workers instead, as goroutines\n" +
			"of one program share a kv.Client: their requests are then multiplexed on N connections.\n\n" +
			"Against a server on the same small host, GOMAXPROCS=1 in both processes gives them the\n" +
			"thread budget of Redis and redis-benchmark (tools/bench/kv.py's p99 pass does so).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			op, _ := fs.GetString("op")
			if op != "get" && op != "put" {
				return fmt.Errorf("--op %q: must be get or put", op)
			}
			size, err := sizeFlag(fs, "value-size")
			if err != nil {
				return err
			}
			ops, _ := fs.GetInt64("ops")
			conc, _ := fs.GetInt("concurrency")
			keys, _ := fs.GetInt("keys")
			if ops < 1 || conc < 1 || keys < 1 {
				return errors.New("--ops, --concurrency and --keys must be at least 1")
			}
			nc := conc
			if fs.Changed("clients") {
				nc, _ = fs.GetInt("clients")
				if nc < 1 || nc > conc {
					return fmt.Errorf("--clients %d: must be between 1 and --concurrency (%d)", nc, conc)
				}
			}
			jsonOut, _ := fs.GetBool("json")
			verify, _ := fs.GetBool("verify")
			// Each client's pool holds, for each of its workers, a value
			// buffer and Get's buffer.
			perClient := (conc + nc - 1) / nc
			bufferMB := int(2*size>>20)*perClient + 4
			clients := make([]kvStore, nc)
			defer func() {
				for _, c := range clients {
					if c != nil {
						c.Close()
					}
				}
			}()
			for i := range clients {
				c, _, cancel, err := kvDial(cmd, g, bufferMB)
				if err != nil {
					return err
				}
				cancel() // the timeout bounds the connection; the run may take longer
				clients[i] = c
			}
			workers := make([]kvStore, conc)
			for i := range workers {
				workers[i] = clients[i%nc]
			}
			prefix, _ := fs.GetString("prefix")
			if prefix == "" {
				var r [4]byte
				rand.Read(r[:])
				prefix = fmt.Sprintf("xfer-bench:%x:", r)
			}
			keep, _ := fs.GetBool("keep")
			allowEvict, _ := fs.GetBool("allow-evict")
			res, err := kvBench(cmd.Context(), g, workers, benchKeys{op: op, size: size, ops: ops, keys: keys, prefix: prefix, keep: keep, allowEvict: allowEvict}, verify)
			if err != nil {
				return err
			}
			if jsonOut {
				return writeJSONLine(g.stdout, res)
			}
			fmt.Fprintf(g.stdout, "%-4s %-9s %-5s %11s %12s %10s %10s %10s %10s\n", "op", "transport", "conc", "value", "ops/s", "GB/s", "p50 µs", "p99 µs", "p99.9 µs")
			fmt.Fprintf(g.stdout, "%-4s %-9s %-5d %11s %12.0f %10.3f %10.1f %10.1f %10.1f\n", res.Op, res.Transport, res.Concurrency,
				bytesize.Format(res.ValueSize), res.OpsPerSec, res.BytesPerSec/1e9, float64(res.LatP50Ns)/1e3, float64(res.LatP99Ns)/1e3, float64(res.LatP999Ns)/1e3)
			return nil
		},
	}
	kvClientFlags(cmd.Flags())
	fs := cmd.Flags()
	fs.String("op", "get", "operation: get or put")
	fs.Int64("ops", 100000, "number of operations")
	fs.String("value-size", "4KiB", "value `size`, e.g. 4096, 4KiB, 1MiB")
	fs.Int("concurrency", 1, "number of concurrent workers (by default, each a client of its own)")
	fs.Int("clients", 0, "number of clients the workers share (default: one per worker)")
	fs.Int("keys", 1000, "number of distinct keys")
	fs.Bool("json", false, "print one JSON line")
	fs.Bool("verify", false, "check every GET's value")
	fs.String("prefix", "", "prefix of the benchmark's keys (default: xfer-bench:RANDOM:, never a key of yours)")
	fs.Bool("keep", false, "keep the benchmark's keys on the server (default: delete them at the end)")
	fs.Bool("allow-evict", false, "let the benchmark's keys evict other values from a full server (default: use fewer keys, or refuse)")
	return cmd
}

// distinct counts the different clients in cs.
func distinct(cs []kvStore) int {
	seen := make(map[kvStore]bool, len(cs))
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

// benchKeys is what a kv bench run writes: keys named prefix + a number.
type benchKeys struct {
	op         string
	size, ops  int64
	keys       int
	prefix     string
	keep       bool // leave the keys on the server
	allowEvict bool // the keys may evict other values
}

func kvBench(ctx context.Context, g *globals, clients []kvStore, bk benchKeys, verify bool) (rec kvBenchRecord, err error) {
	op, size, ops, keys := bk.op, bk.size, bk.ops, bk.keys
	type worker struct {
		c     kvStore
		buf   xfer.Buffer
		check []byte
		lat   *latency.Histogram
	}
	ws := make([]*worker, len(clients))
	for i, c := range clients {
		buf, err := c.Engine().Alloc(int(max(size, 1)))
		if err != nil {
			return kvBenchRecord{}, fmt.Errorf("client buffer: %w", err)
		}
		ws[i] = &worker{c: c, buf: buf, check: make([]byte, size), lat: latency.New()}
	}
	// The key names are made before the run, as redis-benchmark's are, so
	// that formatting them is not timed (up to a million of them; more are
	// formatted per operation).
	keyName := func(k int) string { return fmt.Sprintf("%s%012d", bk.prefix, k) }
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
	st, err := kvStats(ctx, clients[0])
	if err != nil {
		return kvBenchRecord{}, err
	}
	per := uint64(max(size, 64))
	if fit := int(st.Capacity / 2 / per); keys > fit {
		fmt.Fprintf(g.stderr, "xfer kv bench: %d keys of %s do not fit half the server's pool (%s): using %d\n", keys, bytesize.Format(size), bytesize.Human(int64(st.Capacity)), max(fit, 1))
		keys = max(fit, 1)
	}
	// Half the free space, as half the pool above: a PUT over a key holds
	// the old value and the new one until it completes.
	if free := st.Capacity - min(st.PoolUsed, st.Capacity); st.Keys > 0 && !bk.allowEvict && uint64(keys)*per > free/2 {
		fit := int(free / 2 / per)
		if fit < 1 {
			return kvBenchRecord{}, fmt.Errorf("the server holds %d keys and has %s free, less than one %s value: the benchmark would evict your values (--allow-evict lets it)",
				st.Keys, bytesize.Human(int64(free)), bytesize.Format(size))
		}
		fmt.Fprintf(g.stderr, "xfer kv bench: the server holds %d keys of yours and has %s free: using %d keys so that none is evicted (--allow-evict lets it use more)\n",
			st.Keys, bytesize.Human(int64(free)), fit)
		keys = fit
	}
	if !bk.keep {
		defer func() {
			// Delete what the run wrote, also when it failed or was
			// interrupted, with a context of its own; not from a server
			// that stalled or is gone, which would only wait again.
			if errors.Is(err, xfer.ErrStalled) || errors.Is(err, kv.ErrUnavailable) {
				fmt.Fprintf(g.stderr, "xfer kv bench: the benchmark's keys (%s*) are left on the server\n", bk.prefix)
				return
			}
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for k := range keys {
				if derr := clients[0].Delete(dctx, key(k)); derr != nil && !errors.Is(derr, kv.ErrNotFound) {
					if err == nil {
						err = fmt.Errorf("deleting the benchmark's keys (%s*): %w", bk.prefix, derr)
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
				return kvBenchRecord{}, fmt.Errorf("fill: %w", err)
			}
		}
	}
	var next, done atomic.Int64
	one := func(w *worker, i int64) error {
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
		if err := one(ws[i%int64(len(ws))], i); err != nil {
			return kvBenchRecord{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, w := range ws {
		w.lat.Reset()
	}
	hide := showProgress(g.stderr, "kv "+op+" "+bytesize.Format(size), limit{iters: ops}, done.Load)
	var wg sync.WaitGroup
	errs := make(chan error, len(ws))
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
					if err := one(w, i); err != nil {
						errs <- err
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
		return kvBenchRecord{}, err
	}
	lat := latency.New()
	for _, w := range ws {
		lat.Merge(w.lat)
		w.c.Engine().Free(w.buf)
	}
	sec := elapsed.Seconds()
	return kvBenchRecord{
		Op: op, Transport: clients[0].Transport(), ValueSize: size, Concurrency: len(clients), Clients: distinct(clients),
		Ops: ops, Seconds: sec, OpsPerSec: float64(ops) / sec, BytesPerSec: float64(ops*size) / sec,
		LatP50Ns: int64(lat.Quantile(50)), LatP99Ns: int64(lat.Quantile(99)), LatP999Ns: int64(lat.Quantile(99.9)), LatMaxNs: int64(lat.Max()),
		Verified: verify && op == "get",
	}, nil
}

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/kv"
)

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
			workers := make([]bench.KVStore, conc)
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
			res, err := bench.KV(cmd.Context(), workers, bench.KVConfig{
				Op: op, Size: size, Ops: ops, Keys: keys, Prefix: prefix, Keep: keep, AllowEvict: allowEvict, Verify: verify,
				Stats: func(ctx context.Context) (kv.Stats, error) { return kvStats(ctx, clients[0]) },
				Notes: g.stderr,
				Progress: func(desc string, lim bench.Limit, completed func() int64) func() {
					return showProgress(g.stderr, desc, lim, completed)
				},
			})
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

// Command soak runs one xfer serve for a long while against verified
// benches and connection churn, and fails unless the server's memory,
// goroutines and open descriptors stop growing. make soak runs it for 10
// minutes (SOAK_DURATION); docs/TESTING.md has the figures of a run.
//
// Each round runs one xfer bench --verify against the server, in turn over
// tcp and shm, WRITE and READ, while bursts of churn follow one another
// until the bench is done: engines of this process that dial the server
// (half under the shm policy, half under tcp), check they got that
// transport and the server's export, and close; and raw connections that
// send a few bytes that are no handshake, or none, and close. Once both
// are done the soak reads the server's /metrics
// (process_resident_memory_bytes, go_goroutines, process_open_fds) until
// two readings agree, so every sample is of an idle server. After a
// warm-up (a fifth of the samples), the largest value in the last third of
// the samples must stay within a bound of the largest in the first third
// (judge.go). Any failed round, failed dial, a server that exits, or one
// that does not exit cleanly on SIGTERM fails the soak too.
//
// Usage:
//
//	go run ./tools/soak --xfer ./xfer --duration 10m
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	o := Options{RSS: defaultRSSBound, Goroutines: defaultGoroutinesBound, FDs: defaultFDsBound}
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	fs.StringVar(&o.Xfer, "xfer", "./xfer", "the xfer `binary` (make build)")
	fs.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long to start new rounds")
	fs.DurationVar(&o.Bench, "bench", 500*time.Millisecond, "each size's --duration in a round's bench")
	fs.StringVar(&o.Sizes, "size", "4KiB,256KiB,4MiB", "a round's bench --size")
	fs.IntVar(&o.Churn, "churn", 8, "engines that dial and close in each burst of churn")
	fs.IntVar(&o.Scans, "scans", 4, "raw connections made and closed in each burst of churn")
	fs.DurationVar(&o.ChurnEvery, "churn-every", 100*time.Millisecond, "start a burst of churn this often while a bench runs")
	fs.Float64Var(&o.RSS.Rel, "growth", o.RSS.Rel, "each resource's last third may exceed its first third's largest by this `fraction`, plus the slack below")
	rssSlack := fs.Int("rss-slack", int(o.RSS.Abs)>>20, "and rss by this many `MiB` more")
	fs.Float64Var(&o.Goroutines.Abs, "goroutine-slack", o.Goroutines.Abs, "and goroutines by this `count` more")
	fs.Float64Var(&o.FDs.Abs, "fd-slack", o.FDs.Abs, "and open descriptors by this `count` more")
	fs.StringVar(&o.ServerLog, "server-log", "", "write all the server says on stderr to `file` (with XFER_LOG_LEVEL=info it says more)")
	verbose := fs.Bool("v", false, "print a line per round")
	fs.Parse(os.Args[1:])
	o.RSS.Abs = float64(*rssSlack << 20)
	o.Goroutines.Rel, o.FDs.Rel = o.RSS.Rel, o.RSS.Rel
	if *verbose {
		o.Log = os.Stderr
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		os.Exit(1)
	}
}

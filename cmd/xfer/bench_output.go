package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/xferio/xfer/bench"
	"golang.org/x/term"
)

// jsonRecord is one line of "bench --json": one object per size. Scripts
// depend on these names; the test pins the exact set.
type jsonRecord struct {
	Transport   string  `json:"transport"`
	Op          string  `json:"op"`
	SizeBytes   int64   `json:"size_bytes"`
	Ops         int64   `json:"ops"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	LatP50Ns    int64   `json:"lat_p50_ns"`
	LatP99Ns    int64   `json:"lat_p99_ns"`
	LatP999Ns   int64   `json:"lat_p999_ns"`
	// CPUSecPerGB is null where CPU time cannot be measured.
	CPUSecPerGB *float64 `json:"cpu_sec_per_gb"`
	Verified    bool     `json:"verified"`
}

func newJSONRecord(r bench.Result) jsonRecord {
	rec := jsonRecord{
		Transport:   r.Transport,
		Op:          r.Op,
		SizeBytes:   r.Size,
		Ops:         r.Ops,
		Seconds:     r.Elapsed.Seconds(),
		BytesPerSec: r.BytesPerSec(),
		LatP50Ns:    r.P50.Nanoseconds(),
		LatP99Ns:    r.P99.Nanoseconds(),
		LatP999Ns:   r.P999.Nanoseconds(),
		Verified:    r.Verified,
	}
	if v, ok := r.CPUPerGB(); ok {
		rec.CPUSecPerGB = &v
	}
	return rec
}

// The table's columns; the header and the rows share the widths.
const (
	tableHeader = " %-10s %-6s %9s %9s %9s %8s %8s %8s %9s\n"
	tableRow    = " %-10s %-6s %9d %9d %9.3f %8.1f %8.1f %8.1f %9s\n"
)

// resultWriter prints results as they come: a perftest-like table, or one
// JSON object per line.
type resultWriter struct {
	w      io.Writer
	json   bool
	header bool // the table header has been printed
}

func (o *resultWriter) write(r bench.Result) error {
	if o.json {
		b, err := json.Marshal(newJSONRecord(r))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.w, "%s\n", b)
		return err
	}
	if !o.header {
		o.header = true
		if _, err := fmt.Fprintf(o.w, tableHeader, "transport", "op", "bytes", "ops", "GB/s", "p50 µs", "p99 µs", "max µs", "cpu s/GB"); err != nil {
			return err
		}
	}
	cpu := "-"
	if v, ok := r.CPUPerGB(); ok {
		cpu = fmt.Sprintf("%.3f", v)
	}
	_, err := fmt.Fprintf(o.w, tableRow, r.Transport, r.Op, r.Size, r.Ops, r.BytesPerSec()/1e9,
		micros(r.P50), micros(r.P99), micros(r.Max), cpu)
	return err
}

// note prints a footer line under the table; JSON output has none.
func (o *resultWriter) note(format string, args ...any) error {
	if o.json || !o.header {
		return nil
	}
	_, err := fmt.Fprintf(o.w, " # "+format+"\n", args...)
	return err
}

func micros(d time.Duration) float64 { return float64(d) / 1e3 }

// showProgress draws a progress bar on w while a size runs, if w is a
// terminal, and returns the function that removes it. completed reports the
// operations done so far.
func showProgress(w io.Writer, desc string, lim bench.Limit, completed func() int64) (hide func()) {
	if !isTerminal(w) {
		return func() {}
	}
	// The bar counts operations with --iters, milliseconds otherwise.
	total := lim.Iters
	if total == 0 {
		total = max(lim.Dur.Milliseconds(), 1)
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(false),
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if lim.Iters > 0 {
					_ = bar.Set64(min(completed(), total))
				} else {
					_ = bar.Set64(min(time.Since(start).Milliseconds(), total))
				}
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		_ = bar.Clear()
	}
}

// progressOn is the drivers' progress display: showProgress on w.
func progressOn(w io.Writer) bench.Progress {
	return func(desc string, lim bench.Limit, completed func() int64) func() {
		return showProgress(w, desc, lim, completed)
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// writeJSONLine writes v to w as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Record is one line of `xfer bench --json`: one object per size. Scripts
// depend on these names; the test pins the exact set.
type Record struct {
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

// Record is r as a line of JSON output.
func (r Result) Record() Record {
	rec := Record{
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

// Writer prints results as they come to W: a perftest-like table, or with
// JSON one Record per line. It is for one goroutine.
type Writer struct {
	W      io.Writer
	JSON   bool
	header bool // the table header has been printed
}

// Write prints r: a row of the table (under its header, the first time)
// or a line of JSON.
func (o *Writer) Write(r Result) error {
	if o.JSON {
		b, err := json.Marshal(r.Record())
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.W, "%s\n", b)
		return err
	}
	if !o.header {
		o.header = true
		if _, err := fmt.Fprintf(o.W, tableHeader, "transport", "op", "bytes", "ops", "GB/s", "p50 µs", "p99 µs", "max µs", "cpu s/GB"); err != nil {
			return err
		}
	}
	cpu := "-"
	if v, ok := r.CPUPerGB(); ok {
		cpu = fmt.Sprintf("%.3f", v)
	}
	_, err := fmt.Fprintf(o.W, tableRow, r.Transport, r.Op, r.Size, r.Ops, r.BytesPerSec()/1e9,
		Micros(r.P50), Micros(r.P99), Micros(r.Max), cpu)
	return err
}

// Note prints a footer line under the table; JSON output has none.
func (o *Writer) Note(format string, args ...any) error {
	if o.JSON || !o.header {
		return nil
	}
	_, err := fmt.Fprintf(o.W, " # "+format+"\n", args...)
	return err
}

// Micros is d in microseconds, the table's and the plots' unit.
func Micros(d time.Duration) float64 { return float64(d) / 1e3 }

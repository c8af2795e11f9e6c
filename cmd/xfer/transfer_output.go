package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/xferio/xfer/bytesize"
)

// transferResult is one transfer as a side saw it. Seconds is the
// consumer's Get; PutSeconds the producer's Put (see the command's help).
type transferResult struct {
	Role           string  `json:"role"`
	Transfer       int     `json:"transfer"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`
	BytesPerSec    float64 `json:"bytes_per_sec"`
	GBps           float64 `json:"gbps"`
	PutSeconds     float64 `json:"put_seconds"`
	PutBytesPerSec float64 `json:"put_bytes_per_sec"`
	MD5            *string `json:"md5"`    // null under --benchmark
	MD5OK          *bool   `json:"md5_ok"` // null under --benchmark
}

// transferSummary sums a side's transfers up.
type transferSummary struct {
	Summary        bool    `json:"summary"` // always true: tells the summary line from the others
	Role           string  `json:"role"`
	Transfers      int     `json:"transfers"`
	Bytes          int64   `json:"bytes"`
	Seconds        float64 `json:"seconds"`       // the Gets, summed
	BytesPerSec    float64 `json:"bytes_per_sec"` // Bytes / Seconds
	GBpsMedian     float64 `json:"gbps_median"`   // of the transfers' get GB/s
	GBpsMin        float64 `json:"gbps_min"`
	GBpsMax        float64 `json:"gbps_max"`
	PutSeconds     float64 `json:"put_seconds"`
	PutBytesPerSec float64 `json:"put_bytes_per_sec"`
	E2EBytesPerSec float64 `json:"e2e_bytes_per_sec"` // Bytes / (Seconds + PutSeconds)
	MD5OK          *bool   `json:"md5_ok"`            // all matched; null under --benchmark
	MD5Mismatches  int     `json:"md5_mismatches"`
	Mode           string  `json:"mode"`
	Transport      string  `json:"transport"`
	Pull           string  `json:"pull"`
	DType          string  `json:"dtype"`
	TensorBytes    int64   `json:"tensor_bytes"`
	WallSeconds    float64 `json:"wall_seconds"` // from the first transfer's start to the last's end
	MemoryMB       int     `json:"memory_mb"`    // this side's pool
}

// rate is n bytes over secs, per second (0 when secs is 0).
func rate(n int64, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// transferOut prints a side's results as text or JSON lines, with a
// progress bar on a terminal.
type transferOut struct {
	w       io.Writer
	json    bool
	bar     *progressbar.ProgressBar
	results []transferResult
}

// newTransferOut shows a progress bar on stderr when it is a terminal,
// the output is text and the run is long enough to want one: tensors of
// 64 MiB or more, or 10 transfers or more.
func newTransferOut(stdout, stderr io.Writer, plan transferPlan) *transferOut {
	o := &transferOut{w: stdout, json: plan.json}
	if !plan.json && isTerminal(stderr) && (plan.size >= 64<<20 || plan.n >= 10) {
		// It counts transfers: their times and rates are on the lines.
		o.bar = progressbar.NewOptions(plan.n,
			progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription(plan.role.String()+" transfers"),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
		)
	}
	return o
}

func boolText(ok *bool) string {
	switch {
	case ok == nil:
		return "MD5 not checked (--benchmark)"
	case *ok:
		return "MD5 match"
	}
	return "MD5 MISMATCH"
}

// add prints one transfer.
func (o *transferOut) add(r transferResult, n int) error {
	o.results = append(o.results, r)
	o.clear()
	var err error
	if o.json {
		err = writeJSONLine(o.w, r)
	} else {
		line := fmt.Sprintf("transfer %d/%d: %s  get %.4f s (%.2f GB/s)", r.Transfer, n, bytesize.Format(r.Bytes), r.Seconds, r.GBps)
		if r.PutSeconds > 0 {
			line += fmt.Sprintf("  put %.4f s (%.2f GB/s)", r.PutSeconds, r.PutBytesPerSec/1e9)
		}
		line += "  " + boolText(r.MD5OK)
		if r.MD5 != nil {
			line += " (" + *r.MD5 + ")"
		}
		_, err = fmt.Fprintln(o.w, line)
	}
	if o.bar != nil {
		_ = o.bar.Add(1)
	}
	return err
}

// clear takes the progress bar off the terminal (before an error, say).
func (o *transferOut) clear() {
	if o.bar != nil {
		_ = o.bar.Clear()
	}
}

// summary prints the summary and returns it.
func (o *transferOut) summary(s transferSummary) (transferSummary, error) {
	o.clear()
	var gbps []float64
	for _, r := range o.results {
		s.Transfers++
		s.Bytes += r.Bytes
		s.Seconds += r.Seconds
		s.PutSeconds += r.PutSeconds
		gbps = append(gbps, r.GBps)
		if r.MD5OK != nil && !*r.MD5OK {
			s.MD5Mismatches++
		}
	}
	s.Summary = true
	s.BytesPerSec = rate(s.Bytes, s.Seconds)
	s.PutBytesPerSec = rate(s.Bytes, s.PutSeconds)
	s.E2EBytesPerSec = rate(s.Bytes, s.Seconds+s.PutSeconds)
	if len(gbps) > 0 {
		slices.Sort(gbps)
		s.GBpsMin, s.GBpsMax = gbps[0], gbps[len(gbps)-1]
		if m := len(gbps) / 2; len(gbps)%2 == 1 {
			s.GBpsMedian = gbps[m]
		} else {
			s.GBpsMedian = (gbps[m-1] + gbps[m]) / 2
		}
	}
	if len(o.results) > 0 && o.results[0].MD5OK != nil {
		ok := s.MD5Mismatches == 0
		s.MD5OK = &ok
	}
	if o.json {
		return s, writeJSONLine(o.w, s)
	}
	verdict := "MD5 not checked (--benchmark)"
	if s.MD5OK != nil {
		if *s.MD5OK {
			verdict = fmt.Sprintf("MD5: all %d matched", s.Transfers)
		} else {
			verdict = fmt.Sprintf("MD5: %d of %d did NOT match", s.MD5Mismatches, s.Transfers)
		}
	}
	_, err := fmt.Fprintf(o.w, "%s: %d transfers of %s (%s tensors) over %s, mode %s, pull %s\n"+
		"  get GB/s: median %.2f, min %.2f, max %.2f (%.2f GB/s over %.3f s of Gets)\n"+
		"  put GB/s: %.2f; put + get: %.2f GB/s\n  %s\n",
		s.Role, s.Transfers, bytesize.Format(s.TensorBytes), s.DType, s.Transport, s.Mode, s.Pull,
		s.GBpsMedian, s.GBpsMin, s.GBpsMax, s.BytesPerSec/1e9, s.Seconds,
		s.PutBytesPerSec/1e9, s.E2EBytesPerSec/1e9, verdict)
	return s, err
}

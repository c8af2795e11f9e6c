package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/bytesize"
)

// transferOut prints a side's results as text or JSON lines, with a
// progress bar on a terminal.
type transferOut struct {
	w    io.Writer
	json bool
	bar  *progressbar.ProgressBar
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
func (o *transferOut) add(r bench.TensorResult, n int) error {
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

// summary prints the summary.
func (o *transferOut) summary(s bench.TensorSummary) error {
	o.clear()
	if o.json {
		return writeJSONLine(o.w, s)
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
	return err
}

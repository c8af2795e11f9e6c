package main

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/xferio/xfer/bench"
	"golang.org/x/term"
)

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

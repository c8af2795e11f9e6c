package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJudge: a resource that comes back to the same level passes, also
// after a warm-up that climbs; one that keeps climbing fails; a series too
// short for three thirds gets no verdict.
func TestJudge(t *testing.T) {
	b := Bound{Rel: 0.10, Abs: 8}
	flat := []float64{5, 40, 12, 14, 12, 13, 12, 13, 12, 13, 12, 14, 12}
	v, err := judge("goroutines", 1, flat, 2, b)
	if err != nil || !v.OK {
		t.Errorf("flat series after warm-up: %+v, %v", v, err)
	}
	if v.MaxFirst != 14 || v.MaxLast != 14 || v.First != 5 || v.Last != 12 {
		t.Errorf("flat series: %+v", v)
	}
	leak := make([]float64, 30)
	for i := range leak {
		leak[i] = 12 + float64(i) // one goroutine more each round
	}
	if v, err := judge("goroutines", 1, leak, warmUp(len(leak)), b); err != nil || v.OK {
		t.Errorf("a goroutine per round: %+v, %v", v, err)
	} else if !strings.Contains(v.String(), "GROWS") {
		t.Errorf("a goroutine per round prints %q", v)
	}
	if _, err := judge("rss", 1<<20, flat[:10], 2, b); err == nil {
		t.Error("8 samples after warm-up were judged")
	}
}

// TestParseMetrics: the three gauges are taken from an exposition, and
// one that lacks any is an error.
func TestParseMetrics(t *testing.T) {
	const text = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
go_gc_duration_seconds{quantile="0"} 1e-05
process_open_fds 14
process_resident_memory_bytes 9.9467264e+07
`
	smp, err := parseMetrics(strings.NewReader(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	if smp.Goroutines != 12 || smp.FDs != 14 || smp.RSS != 99467264 {
		t.Errorf("parsed %+v", smp)
	}
	if _, err := parseMetrics(strings.NewReader("go_goroutines 12\n"), "test"); err == nil {
		t.Error("an exposition without process_open_fds parsed")
	}
}

// TestSoakShort runs the soak for a few seconds against a real xfer serve:
// benches over tcp and shm, WRITE and READ, all verified, and churn; no
// round or dial may fail, the server must sample idle after each round
// and exit cleanly on SIGTERM. Seconds are too few for a verdict on
// growth: make soak runs the 10 minutes that give one.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs xfer serve and xfer bench: skipped in -short mode")
	}
	bin := os.Getenv("TEST_XFER_BINARY") // as cmd/xfer's end-to-end tests take it
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "xfer")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/xferio/xfer/cmd/xfer").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	o := Options{Xfer: bin, Duration: 6 * time.Second, Bench: 200 * time.Millisecond, Sizes: "4KiB,1MiB",
		Churn: 4, Scans: 2, ChurnEvery: 200 * time.Millisecond,
		RSS: defaultRSSBound, Goroutines: defaultGoroutinesBound, FDs: defaultFDsBound}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	if len(rep.Failures) > 0 {
		t.Errorf("%d failures", len(rep.Failures))
	}
	for _, k := range []string{"tcp write", "shm write", "tcp read", "shm read"} {
		if rep.Rounds[k] == 0 && rep.Duration > 8*time.Second {
			t.Errorf("no %s round passed in %v", k, rep.Duration)
		}
	}
	if rep.Rounds["tcp write"] == 0 || rep.Dials == 0 || rep.Scans == 0 {
		t.Errorf("rounds %v, %d dials, %d raw connections: the soak did nothing", rep.Rounds, rep.Dials, rep.Scans)
	}
	if len(rep.Samples) != rep.Rounds["tcp write"]+rep.Rounds["shm write"]+rep.Rounds["tcp read"]+rep.Rounds["shm read"] {
		t.Errorf("%d samples for rounds %v", len(rep.Samples), rep.Rounds)
	}
	for _, smp := range rep.Samples {
		if smp.RSS <= 0 || smp.Goroutines <= 0 || smp.FDs <= 0 {
			t.Errorf("sample %+v", smp)
		}
	}
}

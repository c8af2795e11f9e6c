package xfer

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/internal/batch"
	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/internal/status"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
)

// BenchmarkMetricsHooks is what the metrics add to one successful
// operation on an endpoint that counts its own (tcp's, shm's), alone, as
// Peer.do runs it: the countdown to the next latency sample (and the
// clock and the histogram for one operation in 16, on shm in 128), the check that the
// endpoint counts, and opDone. BenchmarkWriteMetrics measures the same
// inside a whole WRITE, where the machine's noise is larger than this
// difference.
func BenchmarkMetricsHooks(b *testing.B) {
	for _, tr := range []metrics.Transport{{Name: "tcp"}, {Name: "shm", Caps: transport.Caps{MapsMemory: true}}} {
		ep := ownCounter{name: tr.Name}
		b.Run(tr.Name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Config{Transports: []metrics.Transport{tr}, Source: noSource{}})
			if err != nil {
				b.Fatal(err)
			}
			p := &Peer{e: &Engine{metrics: m}}
			box := p.setEndpoint(ep)
			c := batch.GetCall()
			b.ReportAllocs()
			for b.Loop() {
				conn := p.ep.Load().conn
				var start time.Time
				if conn != nil && c.Timed(conn.Every()) {
					start = time.Now()
				}
				if conn != nil {
					conn.Posted(metrics.Write)
				}
				p.opDone(conn, metrics.Write, 64, start, nil)
			}
			if !box.conn.CountsOwn() {
				b.Fatal("the endpoint does not count its operations")
			}
			h := testutil.Metric(b, reg, "xfer_op_duration_seconds", "op", "write", "transport", ep.Transport())
			if h.GetHistogram().GetSampleCount() == 0 {
				b.Fatal("no latency sampled")
			}
		})
	}
}

// ownCounter stands for an endpoint of transport name that counts its own
// operations, as tcp's and shm's do (transport.Counter); the hooks never
// call into it. (A zero tcp.Endpoint or shm.Endpoint cannot even name its
// transport.)
type ownCounter struct {
	transport.Endpoint
	name string
}

func (e ownCounter) Transport() string      { return e.name }
func (ownCounter) Counts() transport.Counts { return transport.Counts{} }

// noSource is an engine with nothing to show at scrape time.
type noSource struct{}

func (noSource) Snapshot() metrics.Snapshot { return metrics.Snapshot{} }

// gathered is the value of the counter name{labels} that g gathers (0
// when it has no such series).
func gathered(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	return testutil.Metric(tb, g, name, labels...).GetCounter().GetValue()
}

// TestFellBack: a fallback counts under its transport and reason, and the
// status keeps the latest ones, at most status.MaxRecent, with the error.
func TestFellBack(t *testing.T) {
	e := &Engine{log: slog.New(slog.DiscardHandler)}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Config{Source: noSource{}}) // a bare engine has nothing to scrape
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = m
	e.fellBack("10.0.0.2:7471", "rdma", metrics.ReasonSetupFailed, "no device", "falling back")
	if got := gathered(t, reg, "xfer_fallbacks_total", "transport", "rdma", "reason", metrics.ReasonSetupFailed); got != 1 {
		t.Errorf("xfer_fallbacks_total{rdma,setup_failed} = %v, want 1", got)
	}
	if got := gathered(t, reg, "xfer_fallbacks_total", "transport", "shm", "reason", metrics.ReasonUnusable); got != 0 {
		t.Errorf("xfer_fallbacks_total{shm,unusable} = %v, want 0", got)
	}
	for i := range 100 {
		e.fellBack("10.0.0.3:7471", "shm", metrics.ReasonUnusable, fmt.Sprint("other host ", i), "falling back")
	}
	r, _ := e.stats.Recent()
	if len(r) != status.MaxRecent || r[len(r)-1].Detail != "other host 99" || r[len(r)-1].Reason != metrics.ReasonUnusable || r[len(r)-1].Peer != "10.0.0.3:7471" {
		t.Errorf("recent fallbacks: %d, the last %+v", len(r), r[len(r)-1])
	}
	if e.Fallbacks() != 101 {
		t.Errorf("Fallbacks() = %d, want 101", e.Fallbacks())
	}
}

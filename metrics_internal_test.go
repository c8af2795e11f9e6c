package xfer

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/shm"
	"github.com/xferio/xfer/transport/tcp"
)

// BenchmarkMetricsHooks is what the metrics add to one successful
// operation on an endpoint that counts its own (tcp's, shm's), alone, as
// Peer.do runs it: the countdown to the next latency sample (and the
// clock and the histogram for one operation in 16, on shm in 128), the check that the
// endpoint counts, and opDone. BenchmarkWriteMetrics measures the same
// inside a whole WRITE, where the machine's noise is larger than this
// difference.
func BenchmarkMetricsHooks(b *testing.B) {
	for _, ep := range []transport.Endpoint{&tcp.Endpoint{}, &shm.Endpoint{}} {
		b.Run(ep.Transport(), func(b *testing.B) {
			e := &Engine{}
			m, err := newEngineMetrics(e, prometheus.NewRegistry())
			if err != nil {
				b.Fatal(err)
			}
			e.metrics = m
			p := &Peer{e: e}
			box := p.setEndpoint(ep)
			c := callPool.Get().(*call)
			b.ReportAllocs()
			for b.Loop() {
				conn := p.ep.Load().conn
				var start time.Time
				if conn != nil && c.timed(conn.every) {
					start = time.Now()
				}
				if conn != nil && conn.counter == nil {
					conn.ops[mWrite].Add(1)
				}
				p.opDone(conn, mWrite, 64, start, nil)
			}
			if box.conn.counter == nil {
				b.Fatal("the endpoint does not count its operations")
			}
			h := &dto.Metric{}
			if err := box.conn.lat[mWrite].(prometheus.Metric).Write(h); err != nil || h.GetHistogram().GetSampleCount() == 0 {
				b.Fatalf("no latency sampled (%v)", err)
			}
		})
	}
}

// TestFellBack: a fallback counts under its transport and reason, and the
// status keeps the latest ones, at most maxRecentFallbacks, with the error.
func TestFellBack(t *testing.T) {
	e := &Engine{log: slog.New(slog.DiscardHandler)}
	m, err := newEngineMetrics(e, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = m
	e.fellBack("10.0.0.2:7471", "rdma", reasonSetupFailed, "no device", "falling back")
	if got := testutil.ToFloat64(m.fallback.WithLabelValues("rdma", reasonSetupFailed)); got != 1 {
		t.Errorf("xfer_fallbacks_total{rdma,setup_failed} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.fallback.WithLabelValues("shm", reasonUnusable)); got != 0 {
		t.Errorf("xfer_fallbacks_total{shm,unusable} = %v, want 0", got)
	}
	for i := range 100 {
		e.fellBack("10.0.0.3:7471", "shm", reasonUnusable, fmt.Sprint("other host ", i), "falling back")
	}
	r := e.stats.recentFallbacks()
	if len(r) != maxRecentFallbacks || r[len(r)-1].Detail != "other host 99" || r[len(r)-1].Reason != reasonUnusable || r[len(r)-1].Peer != "10.0.0.3:7471" {
		t.Errorf("recent fallbacks: %d, the last %+v", len(r), r[len(r)-1])
	}
	if e.Fallbacks() != 101 {
		t.Errorf("Fallbacks() = %d, want 101", e.Fallbacks())
	}
}

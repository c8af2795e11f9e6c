package xfer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkMetricsHooks is what the metrics add to one successful
// operation, alone: opStart (an atomic add, and the clock for one
// operation in 16) and opDone (the histogram for those, an atomic add).
// BenchmarkWriteMetrics measures the same inside a whole WRITE, where the
// machine's noise is larger than this difference.
func BenchmarkMetricsHooks(b *testing.B) {
	e := &Engine{}
	m, err := newEngineMetrics(e, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	e.metrics = m
	p := &Peer{e: e}
	p.stats.conn.Store(m.newConn("tcp", nil))
	b.ReportAllocs()
	for b.Loop() {
		c := p.stats.conn.Load()
		start := opStart(c, mWrite)
		p.opDone(c, mWrite, 64, start, nil)
	}
	if got := p.stats.conn.Load().ops[mWrite].Load(); got == 0 {
		b.Fatal("no operation counted")
	}
}

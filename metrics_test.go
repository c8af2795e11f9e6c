package xfer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// metricsPair opens a listening server engine exporting a 4 MiB region
// "target" and a client engine dialed to it over pol; the client registers
// its metrics on reg and the server on srvReg, each when not nil.
func metricsPair(tb testing.TB, pol xfer.Policy, reg, srvReg prometheus.Registerer) (cli *xfer.Engine, p *xfer.Peer, desc xfer.RegionDesc) {
	return metricsPairWith(tb, xfer.Config{Transport: pol}, reg, srvReg)
}

// metricsPairWith is metricsPair with base as both engines' config.
func metricsPairWith(tb testing.TB, base xfer.Config, reg, srvReg prometheus.Registerer) (cli *xfer.Engine, p *xfer.Peer, desc xfer.RegionDesc) {
	tb.Helper()
	ctx := context.Background()
	scfg := base
	scfg.Listen, scfg.MemoryMB = "127.0.0.1:0", 8
	if srvReg != nil {
		scfg.Metrics = srvReg
	}
	srv, err := xfer.Open(ctx, scfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	target, err := srv.NewRegion(4<<20, xfer.AccessReadWrite)
	if err != nil {
		tb.Fatal(err)
	}
	srv.Export("target", target)
	cfg := base
	cfg.MemoryMB = 8
	if reg != nil {
		cfg.Metrics = reg
	}
	cli, p = openDialed(ctx, tb, cfg, srv.Addr())
	desc, _ = p.Region("target")
	return cli, p, desc
}

// find returns the series of family name whose labels include labels
// (label name, value, ...), and fails the test when there is none.
func find(t *testing.T, reg *prometheus.Registry, name string, labels ...string) *dto.Metric {
	t.Helper()
	m := testutil.Metric(t, reg, name, labels...)
	if m == nil {
		t.Fatalf("no %s%v in the exposition", name, labels)
	}
	return m
}

// writes is how many WRITEs TestMetrics makes.
const writes = 500

// TestMetrics: an engine with a registry counts exactly the operations it
// ran, their bytes and latencies by op and transport, its failures by
// kind, its connected peers and its pool, on tcp and shm (whose endpoints
// count their own operations, transport.Counter) and on the in-memory
// twin (which does not: the engine counts).
func TestMetrics(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  xfer.Policy
		twin bool
	}{{"tcp", xfer.PolicyTCP, false}, {"shm", xfer.PolicySHM, false}, {"twin", xfer.PolicyTCP, true}} {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.pol
			base := xfer.Config{Transport: pol}
			if tc.twin {
				base = withTwin(base)
			}
			reg, srvReg := prometheus.NewRegistry(), prometheus.NewRegistry()
			cli, p, desc := metricsPairWith(t, base, reg, srvReg)
			ctx := context.Background()
			buf, err := cli.Alloc(1000)
			if err != nil {
				t.Fatal(err)
			}
			for range writes {
				if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				if err := p.Read(ctx, buf.Bytes()[:500], desc.At(0)); err != nil {
					t.Fatal(err)
				}
			}
			b := p.Submit([]xfer.Op{{Kind: xfer.OpWriteNotify, Local: buf.Bytes()[:100], Remote: desc.At(0), Value: 1}})
			if err := b.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			bad := desc
			bad.Key++
			if err := p.Write(ctx, buf.Bytes(), bad.At(0)); !errors.Is(err, xfer.ErrRemoteAccess) {
				t.Fatalf("write with a wrong key: %v", err)
			}
			tr := tc.name
			const w = writes
			checks := []struct {
				name   string
				labels []string
				want   float64
			}{
				{"xfer_ops_total", []string{"op", "write", "transport", tr}, w + 1}, // started: the refused one too
				{"xfer_ops_total", []string{"op", "read", "transport", tr}, 3},
				{"xfer_ops_total", []string{"op", "write_imm", "transport", tr}, 1},
				{"xfer_sent_bytes_total", []string{"transport", tr}, w*1000 + 100},
				{"xfer_received_bytes_total", []string{"transport", tr}, 3 * 500},
				{"xfer_op_errors_total", []string{"op", "write", "kind", "remote_access"}, 1},
				{"xfer_peers_connected", []string{"transport", tr}, 1},
				{"xfer_pool_used_bytes", nil, 1024},
			}
			for _, c := range checks {
				m := find(t, reg, c.name, c.labels...)
				var got float64
				switch {
				case m.Counter != nil:
					got = m.Counter.GetValue()
				case m.Gauge != nil:
					got = m.Gauge.GetValue()
				}
				if got != c.want {
					t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
				}
			}
			// The server sees each of the peer's accesses on tcp; on shm
			// the client copies into its mapping alone, once it has mapped
			// it (the first operations may take the stream meanwhile).
			for op, want := range map[string]float64{"write": w*1000 + 100, "read": 3 * 500} {
				if pol == xfer.PolicySHM {
					break
				}
				if got := find(t, srvReg, "xfer_served_bytes_total", "op", op, "transport", tr).GetCounter().GetValue(); got != want {
					t.Errorf("server's xfer_served_bytes_total{op=%s} = %v, want %v", op, got, want)
				}
			}
			h := find(t, reg, "xfer_op_duration_seconds", "op", "write", "transport", tr).GetHistogram()
			// One write in 16 is timed, at random: none of 500 is a chance
			// of 1e-14.
			if n := h.GetSampleCount(); n == 0 || n > w || h.GetSampleSum() <= 0 {
				t.Errorf("write latency: %d samples summing to %v s, want 1 to %d and more than 0 s", n, h.GetSampleSum(), w)
			}
			st := cli.Status()
			if len(st.Peers) != 1 || st.Peers[0].Ops != w+5 || st.Peers[0].Bytes != w*1000+100+3*500 ||
				!strings.Contains(st.Peers[0].LastError, "key") || st.Peers[0].Transport != tr || !st.Peers[0].Connected {
				t.Errorf("status peers: %+v", st.Peers)
			}
			if n, err := promtestutil.GatherAndCount(reg); err != nil || n == 0 {
				t.Errorf("gather: %d metrics, %v", n, err)
			}
			// Lint the names and help as Prometheus's own linter does.
			problems, err := promtestutil.GatherAndLint(reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, pr := range problems {
				t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
			}
		})
	}
}

// TestMetricsUnregisterOnClose: a closed engine leaves the registry, so
// the next one can register on it; a second engine on the same registry
// is refused with an error that names the metrics, and two engines each
// wrapped with its own label share one.
func TestMetricsUnregisterOnClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	e1, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Metrics: reg}); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Errorf("a second engine on the same registry: %v, want an error naming the metrics", err)
	}
	e1.Close()
	e2, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Metrics: reg})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	e2.Close()
	// A registry that had unwrapped metrics refuses the same names with
	// other labels even after they left it: use a fresh one.
	reg = prometheus.NewRegistry()
	e3, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1,
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"engine": "a"}, reg)})
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	e4, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"engine": "b"}, reg)})
	if err != nil {
		t.Fatalf("a second engine on a wrapped registerer: %v", err)
	}
	defer e4.Close()
}

// TestMetricsAllocs: with metrics on, a synchronous 64-byte WRITE still
// allocates nothing, on tcp and shm.
func TestMetricsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(pol), func(t *testing.T) {
			op := warmMetricsOp(t, pol, prometheus.NewRegistry(), prometheus.NewRegistry())
			if n := testing.AllocsPerRun(500, op); n >= 0.5 {
				t.Errorf("%v allocations per operation with metrics, want 0", n)
			}
		})
	}
}

func warmMetricsOp(tb testing.TB, pol xfer.Policy, reg, srvReg prometheus.Registerer) func() {
	cli, p, desc := metricsPair(tb, pol, reg, srvReg)
	buf, err := cli.Alloc(64)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	op := func() {
		if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
			tb.Fatal(err)
		}
	}
	for range 100 {
		op()
	}
	return op
}

// BenchmarkWriteMetrics is a synchronous 64-byte WRITE with both engines'
// metrics off and on, over tcp and shm: what the metrics cost
// (docs/BENCHMARKS.md, "Metrics cost"). Run with -count and compare the
// off and on rows with benchstat.
func BenchmarkWriteMetrics(b *testing.B) {
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		for _, on := range []bool{false, true} {
			name := "off"
			var reg, srvReg prometheus.Registerer
			if on {
				name, reg, srvReg = "on", prometheus.NewRegistry(), prometheus.NewRegistry()
			}
			b.Run(fmt.Sprintf("%s/metrics=%s", pol, name), func(b *testing.B) {
				op := warmMetricsOp(b, pol, reg, srvReg)
				b.SetBytes(64)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					op()
				}
			})
		}
	}
}

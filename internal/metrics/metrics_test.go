package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// fakeEP is an endpoint of transport name; only Transport is called.
type fakeEP struct {
	transport.Endpoint
	name string
}

func (e *fakeEP) Transport() string { return e.name }

// countingEP is an endpoint that counts its own operations.
type countingEP struct {
	fakeEP
	counts transport.Counts
}

func (e *countingEP) Counts() transport.Counts { return e.counts }

// source is a Snapshot to scrape.
type source struct{ s Snapshot }

func (s *source) Snapshot() Snapshot { return s.s }

func newSet(t *testing.T, src Source) (*Set, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Config{
		Transports:   []Transport{{Name: "tcp"}, {Name: "shm", Caps: transport.Caps{MapsMemory: true}}},
		FallbackFrom: []string{"shm"},
		AuthPlane:    "peer",
		AuthReasons:  []string{"no_proof"},
		Source:       src,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// value is the value of the series name{labels} (name, value, ...) that
// reg gathers, and whether it has it: a series with other labels too is
// not it.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	m := testutil.Metric(t, reg, name, labels...)
	if m == nil || len(m.GetLabel()) != len(labels)/2 {
		return 0, false
	}
	return metricValue(m), true
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

func want(t *testing.T, reg *prometheus.Registry, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(t, reg, name, labels...)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
	} else if got != v {
		t.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// TestSeriesFromStart: every transport's series exist at zero before the
// first connection, as do the fallbacks', retries', stalls' and the auth
// plane's.
func TestSeriesFromStart(t *testing.T) {
	_, reg := newSet(t, &source{})
	for _, tr := range []string{"tcp", "shm"} {
		for _, op := range opNames {
			want(t, reg, 0, "xfer_ops_total", "op", op, "transport", tr)
		}
		want(t, reg, 0, "xfer_sent_bytes_total", "transport", tr)
		want(t, reg, 0, "xfer_setup_retries_total", "transport", tr, "reason", ReasonTransient)
		want(t, reg, 0, "xfer_peer_stalls_total", "transport", tr)
	}
	for _, r := range fallbackReasons {
		want(t, reg, 0, "xfer_fallbacks_total", "transport", "shm", "reason", r)
	}
	want(t, reg, 0, "xfer_auth_failures_total", "plane", "peer", "reason", "no_proof")
	if _, ok := value(t, reg, "xfer_directory_registration", "state", "registered"); ok {
		t.Error("a directory series without a directory entry")
	}
}

// TestConnCounts: a connection's counts are summed while it lives and
// stay in the sums once it is retired, once; an endpoint that counts its
// own is read at scrape time, and the Conn leaves its operations to it.
func TestConnCounts(t *testing.T) {
	m, reg := newSet(t, &source{})
	c := m.NewConn(&fakeEP{name: "tcp"}, nil)
	if c.CountsOwn() || c.Every() != LatencyEvery {
		t.Fatalf("tcp connection: counts its own %v, every %d", c.CountsOwn(), c.Every())
	}
	c.Posted(Write)
	c.Observe(Write, time.Now())
	c.Moved(Write, 64)
	c.Posted(Read)
	c.Moved(Read, 10)
	c.Delivered(5)
	c.Served[0].Add(1)
	c.ServedBytes[0].Add(7)
	if ops, bytes := c.Totals(); ops != 4 || bytes != 86 {
		t.Errorf("Totals() = %d ops, %d bytes, want 4, 86", ops, bytes)
	}
	check := func() {
		t.Helper()
		want(t, reg, 1, "xfer_ops_total", "op", "write", "transport", "tcp")
		want(t, reg, 1, "xfer_ops_total", "op", "read", "transport", "tcp")
		want(t, reg, 1, "xfer_ops_total", "op", "recv", "transport", "tcp")
		want(t, reg, 64, "xfer_sent_bytes_total", "transport", "tcp")
		want(t, reg, 15, "xfer_received_bytes_total", "transport", "tcp")
		want(t, reg, 1, "xfer_served_ops_total", "op", "write", "transport", "tcp")
		want(t, reg, 7, "xfer_served_bytes_total", "op", "write", "transport", "tcp")
		want(t, reg, 1, "xfer_op_duration_seconds", "op", "write", "transport", "tcp")
	}
	check()
	m.Retire(c)
	check()
	m.Retire(c) // a second retirement adds nothing
	check()
	// A connection that replaces another retires it.
	c2 := m.NewConn(&fakeEP{name: "tcp"}, nil)
	c2.Posted(Write)
	m.NewConn(&fakeEP{name: "tcp"}, c2)
	m.Retire(c2)
	want(t, reg, 2, "xfer_ops_total", "op", "write", "transport", "tcp")

	ep := &countingEP{fakeEP: fakeEP{name: "shm"}}
	s := m.NewConn(ep, nil)
	if !s.CountsOwn() || s.Every() != latencyEveryCopy {
		t.Fatalf("shm connection: counts its own %v, every %d", s.CountsOwn(), s.Every())
	}
	s.Posted(Write)
	s.Moved(Write, 64)
	ep.counts.Ops[transport.OpWrite] = 3
	ep.counts.Ops[transport.OpWriteImm] = 1
	ep.counts.Sent = 300
	want(t, reg, 3, "xfer_ops_total", "op", "write", "transport", "shm")
	want(t, reg, 1, "xfer_ops_total", "op", "write_imm", "transport", "shm")
	want(t, reg, 300, "xfer_sent_bytes_total", "transport", "shm")
	m.Retire(s)
	ep.counts.Ops[transport.OpWrite] = 100 // gone: no longer read
	want(t, reg, 3, "xfer_ops_total", "op", "write", "transport", "shm")
}

// TestSnapshot: the gauges and the counters read at scrape time come
// from the Source.
func TestSnapshot(t *testing.T) {
	src := &source{Snapshot{
		Transports: []TransportState{
			{Name: "tcp"},
			{Name: "rdma", Device: "mlx5_0", Rails: []transport.RailStatus{{Device: "mlx5_0", Up: true}, {Device: "mlx5_1", Down: 2, Repeated: 5}}},
		},
		Connected: []string{"tcp", "rdma", "rdma"},
		Pool:      mem.PoolStats{Capacity: 100, InUse: 40, Free: 60, Fragmentation: 0.5},
		Regions:   3,
		Directory: &Registration{State: "retrying", States: []string{"registered", "retrying", "lost"}, Reregistrations: 4},
	}}
	_, reg := newSet(t, src)
	want(t, reg, 1, "xfer_peers_connected", "transport", "tcp", "device", "")
	want(t, reg, 2, "xfer_peers_connected", "transport", "rdma", "device", "mlx5_0")
	want(t, reg, 1, "xfer_rail_up", "transport", "rdma", "device", "mlx5_0")
	want(t, reg, 0, "xfer_rail_up", "transport", "rdma", "device", "mlx5_1")
	want(t, reg, 2, "xfer_rail_failures_total", "transport", "rdma", "device", "mlx5_1")
	want(t, reg, 5, "xfer_rail_failovers_total", "transport", "rdma", "device", "mlx5_1")
	want(t, reg, 40, "xfer_pool_used_bytes")
	want(t, reg, 60, "xfer_pool_free_bytes")
	want(t, reg, 100, "xfer_pool_capacity_bytes")
	want(t, reg, 0.5, "xfer_pool_fragmentation_ratio")
	want(t, reg, 3, "xfer_registered_regions")
	want(t, reg, 0, "xfer_directory_registration", "state", "registered")
	want(t, reg, 1, "xfer_directory_registration", "state", "retrying")
	want(t, reg, 4, "xfer_directory_reregistrations_total")
}

// TestEvents: the hooks count under their labels.
func TestEvents(t *testing.T) {
	m, reg := newSet(t, &source{})
	m.OpFailed(Write, "timeout")
	m.FellBack("shm", ReasonUnusable)
	m.FailedOver("shm", "tcp", ReasonConnLost)
	m.SetupRetried("tcp")
	m.Stalled("tcp")
	m.AuthFailed("peer", "no_proof")
	want(t, reg, 1, "xfer_op_errors_total", "op", "write", "kind", "timeout")
	want(t, reg, 1, "xfer_fallbacks_total", "transport", "shm", "reason", ReasonUnusable)
	want(t, reg, 1, "xfer_failovers_total", "from", "shm", "to", "tcp", "reason", ReasonConnLost)
	want(t, reg, 1, "xfer_setup_retries_total", "transport", "tcp", "reason", ReasonTransient)
	want(t, reg, 1, "xfer_peer_stalls_total", "transport", "tcp")
	want(t, reg, 1, "xfer_auth_failures_total", "plane", "peer", "reason", "no_proof")
}

// TestUnregister: a second Set cannot register beside the first, and can
// once the first is unregistered; a failed New leaves nothing behind.
func TestUnregister(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Config{Source: &source{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, Config{Source: &source{}}); err == nil {
		t.Fatal("a second Set registered beside the first")
	}
	m.Unregister(reg)
	if _, err := New(reg, Config{Source: &source{}}); err != nil {
		t.Fatalf("after Unregister: %v", err)
	}
}

// TestOpOf: every kind of operation has its op label.
func TestOpOf(t *testing.T) {
	for k, w := range map[transport.OpKind]string{transport.OpWrite: "write", transport.OpRead: "read", transport.OpWriteImm: "write_imm", transport.OpSend: "send"} {
		if got := OpOf(k).String(); got != w {
			t.Errorf("OpOf(%v) = %s, want %s", k, got, w)
		}
	}
}

// TestConnAllocs: the hot path's hooks allocate nothing.
func TestConnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	m, _ := newSet(t, &source{})
	c := m.NewConn(&fakeEP{name: "tcp"}, nil)
	start := time.Now()
	if n := testing.AllocsPerRun(1000, func() {
		c.Posted(Write)
		c.Observe(Write, start)
		c.Moved(Write, 64)
		if s := SampleStart(c.Every()); !s.IsZero() {
			c.Observe(Recv, s)
		}
		c.Delivered(8)
	}); n != 0 {
		t.Errorf("%v allocations per operation, want 0", n)
	}
}

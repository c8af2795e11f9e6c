package kv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xferio/xfer"
)

// TestServerMetrics: a server with a registry exports its requests, hits,
// misses, stored bytes and the path each value took, and its engine's
// metrics on the same registry; a client with one exports its requests,
// failures and latencies, and its engine's; Close takes them all away.
func TestServerMetrics(t *testing.T) {
	reg, creg := prometheus.NewRegistry(), prometheus.NewRegistry()
	s := startServer(t, ServerOptions{Metrics: reg})
	c := dialOpts(t, "http://"+s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, Metrics: creg})
	ctx := ctxT(t)
	small, large := pattern(100, 1), pattern(1<<20, 2)
	for key, v := range map[string][]byte{"small": small, "large": large} {
		if err := c.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "nothing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
	// The server counts a data-plane GET once its write completes, which
	// may be just after the client has the value.
	waitFor(t, 10*time.Second, "the server to count the last GET", func() bool {
		return s.Snapshot().DataPlaneBytes >= 2<<20
	})
	want := `
# HELP xfer_kv_gets_total GET requests the KV server received.
# TYPE xfer_kv_gets_total counter
xfer_kv_gets_total 3
# HELP xfer_kv_hits_total GETs of a valid key that found a value.
# TYPE xfer_kv_hits_total counter
xfer_kv_hits_total 2
# HELP xfer_kv_misses_total GETs of a valid key that found none.
# TYPE xfer_kv_misses_total counter
xfer_kv_misses_total 1
# HELP xfer_kv_puts_total PUT requests the KV server received.
# TYPE xfer_kv_puts_total counter
xfer_kv_puts_total 2
# HELP xfer_kv_keys Keys stored.
# TYPE xfer_kv_keys gauge
xfer_kv_keys 2
# HELP xfer_kv_stored_bytes Bytes of the values stored.
# TYPE xfer_kv_stored_bytes gauge
xfer_kv_stored_bytes 1.048676e+06
# HELP xfer_kv_requests_total GETs and PUTs that moved a value, by path: inline (inside the request or response message) or data_plane (a one-sided transfer).
# TYPE xfer_kv_requests_total counter
xfer_kv_requests_total{path="data_plane"} 2
xfer_kv_requests_total{path="inline"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "xfer_kv_gets_total", "xfer_kv_hits_total",
		"xfer_kv_misses_total", "xfer_kv_puts_total", "xfer_kv_keys", "xfer_kv_stored_bytes", "xfer_kv_requests_total"); err != nil {
		t.Error(err)
	}
	// The data-plane engine's own metrics share the registry: the GET of
	// the large value was its WRITE.
	if n, err := testutil.GatherAndCount(reg, "xfer_sent_bytes_total"); err != nil || n == 0 {
		t.Errorf("the engine's xfer_sent_bytes_total: %d series, %v", n, err)
	}
	// The client's own: requests by op, failures by kind, and latencies
	// of those that succeeded.
	want = `
# HELP xfer_kv_client_requests_total Requests this KV client made (Get and GetInto, Put and PutBuffer, Delete), by op.
# TYPE xfer_kv_client_requests_total counter
xfer_kv_client_requests_total{op="delete"} 0
xfer_kv_client_requests_total{op="get"} 3
xfer_kv_client_requests_total{op="put"} 2
# HELP xfer_kv_client_errors_total This KV client's requests that failed, by op and kind (not_found, buffer_too_small, invalid, unavailable, canceled, timeout, other).
# TYPE xfer_kv_client_errors_total counter
xfer_kv_client_errors_total{kind="not_found",op="get"} 1
`
	if err := testutil.GatherAndCompare(creg, strings.NewReader(want), "xfer_kv_client_requests_total", "xfer_kv_client_errors_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(creg, "xfer_kv_client_request_duration_seconds", "xfer_ops_total"); err != nil || n < 3+5 {
		t.Errorf("the client's latencies and its engine's operations: %d series, %v", n, err)
	}
	s.Close()
	c.Close()
	for name, r := range map[string]*prometheus.Registry{"server": reg, "client": creg} {
		if n, err := testutil.GatherAndCount(r); err != nil || n != 0 {
			t.Errorf("%s after Close: %d series left, %v", name, n, err)
		}
	}
}

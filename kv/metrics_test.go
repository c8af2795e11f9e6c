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
// metrics on the same registry; Close takes them all away.
func TestServerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, ServerOptions{Metrics: reg})
	c := dial(t, "http://"+s.addr, xfer.PolicyTCP)
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
	s.Close()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after Close: %d series left, %v", n, err)
	}
}

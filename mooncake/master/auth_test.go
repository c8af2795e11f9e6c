package master_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mooncake/master"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

const secret = "a secret of more than sixteen bytes"

// TestAuth serves a master that requires the shared secret: a client
// with it works; one without it, or with another, is refused before the
// master reads anything.
func TestAuth(t *testing.T) {
	e := start(t, master.Options{}, secret)
	if c := e.mount("a", "s", 0, 1<<20); c != 0 {
		t.Fatalf("mount with the secret: %d", c)
	}
	e.put("k", 10, nil)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := master.New(master.Options{SweepInterval: -1})
	g := s.NewGRPCServer(secret)
	go g.Serve(l)
	t.Cleanup(func() { g.Stop(); s.Close() })
	for name, sec := range map[string]string{"no secret": "", "another secret": "another secret of sixteen bytes"} {
		c, err := master.Dial(context.Background(), l.Addr().String(), master.DialOptions{Secret: sec})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.MountSegment(context.Background(), &masterpb.MountSegmentRequest{ClientId: id("x"), Segment: &masterpb.Segment{Name: "x", Size: 1 << 20}})
		c.Close()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if st := s.Stats(); st.Segments != 0 || st.Clients != 0 || st.AuthFailures != 2 {
		t.Fatalf("a refused call changed the master: %+v", st)
	}

	// A client with the secret refuses a master that does not prove it.
	open := master.New(master.Options{SweepInterval: -1})
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g2 := open.NewGRPCServer("")
	go g2.Serve(l2)
	t.Cleanup(func() { g2.Stop(); open.Close() })
	c, err := master.Dial(context.Background(), l2.Addr().String(), master.DialOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Ping(context.Background(), &masterpb.PingRequest{ClientId: id("a")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a master without the secret: %v, want Unauthenticated", err)
	}
}

// TestDialTimeout dials a port nobody listens on: Dial gives up within
// its OpTimeout.
func TestDialTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t0 := time.Now()
	if c, err := master.Dial(context.Background(), addr, master.DialOptions{OpTimeout: 300 * time.Millisecond}); err == nil {
		c.Close()
		t.Fatal("Dial of a closed port succeeded")
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("Dial took %v", d)
	}
}

// TestMetrics reads the Service's Stats through its Prometheus collector.
func TestMetrics(t *testing.T) {
	e := start(t, master.Options{}, "")
	e.mount("a", "s", 0, 1<<20)
	e.put("k", 100, nil)
	e.get("k")
	e.get("nosuch")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.s.Collector())
	for name, want := range map[string]float64{
		"xfer_mooncake_master_objects":             1,
		"xfer_mooncake_master_segments":            1,
		"xfer_mooncake_master_pool_capacity_bytes": 1 << 20,
		"xfer_mooncake_master_pool_used_bytes":     128,
		"xfer_mooncake_master_gets_total":          2,
		"xfer_mooncake_master_get_hits_total":      1,
		"xfer_mooncake_master_put_ends_total":      1,
	} {
		m := testutil.Metric(t, reg, name)
		if m == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if got := m.GetGauge().GetValue() + m.GetCounter().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

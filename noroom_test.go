package xfer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/twin"
)

// fullTwin is the twin transport standing in for an rdma device whose
// completion queues are full: its Connect (dialer) or Usable (acceptor)
// fails with the error rdma's joinCQ returns then (matching
// transport.ErrNoRoom). A test double, because rdma cannot run on the
// hosts the tests run on (its own tests run in the RDMA VM, make
// verbs-test); everything else is real: two engines, their handshake
// over loopback TCP, and the transport the peer falls back to.
type fullTwin struct {
	*twin.Transport
	dialer, acceptor bool // which side's device is full
}

var errCQFull = fmt.Errorf("rdma: %w: mlx5_0's 16 completion queues of 32768 entries are full (a peer needs 784): too many peers on the device, or lower rdma_max_send_wr, rdma_max_recv_wr or rdma_qps_per_peer", transport.ErrNoRoom)

func (f *fullTwin) Usable(local, remote transport.PeerInfo) error {
	if f.acceptor {
		return errCQFull
	}
	return f.Transport.Usable(local, remote)
}

func (f *fullTwin) Connect(ctx context.Context, p transport.Params) (transport.Endpoint, error) {
	if f.dialer && p.Role == transport.Dialer {
		p.Conn.Close()
		return nil, errCQFull
	}
	return f.Transport.Connect(ctx, p)
}

func withFullTwin(cfg xfer.Config, dialer, acceptor bool) xfer.Config {
	cfg.ExtraTransport = func() transport.Transport {
		return &fullTwin{Transport: twin.New(), dialer: dialer, acceptor: acceptor}
	}
	return cfg
}

// wantFullFallback checks that e counted, showed and logged one fallback
// from the twin for reason full.
func wantFullFallback(t *testing.T, side string, e *xfer.Engine, reg *prometheus.Registry, logs *bytes.Buffer) {
	t.Helper()
	st := e.Status()
	if st.Fallbacks != 1 || len(st.RecentFallbacks) != 1 || st.RecentFallbacks[0].Reason != "full" || st.RecentFallbacks[0].Transport != twin.Name ||
		!strings.Contains(st.RecentFallbacks[0].Detail, "completion queues") {
		t.Errorf("%s's status: %d fallbacks, recent %+v; want one, twin full, naming the completion queues", side, st.Fallbacks, st.RecentFallbacks)
	}
	var got float64 = -1
	if m := testutil.Metric(t, reg, "xfer_fallbacks_total", "transport", twin.Name, "reason", "full"); m != nil {
		got = m.GetCounter().GetValue()
	}
	if got != 1 {
		t.Errorf("%s's xfer_fallbacks_total{transport=twin,reason=full} = %v, want 1", side, got)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "no room for another peer") {
		t.Errorf("%s logged no warning of the full device:\n%s", side, l)
	}
}

// A peer whose best transport has no room for it (rdma, its device's
// completion queues full) is connected over the next one under the auto
// policy, whichever side is full, with the fallback counted, shown and
// logged; under a policy that names the transport, the dial fails with
// ErrNoRoom.
func TestFullDeviceFallsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(t *testing.T, cfg xfer.Config) (*xfer.Engine, *prometheus.Registry, *bytes.Buffer) {
		t.Helper()
		var logs bytes.Buffer
		reg := prometheus.NewRegistry()
		cfg.MemoryMB, cfg.Metrics, cfg.Logger = 8, reg, slog.New(slog.NewTextHandler(&logs, nil))
		e, err := xfer.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, reg, &logs
	}
	roundTrip := func(t *testing.T, e *xfer.Engine, p *xfer.Peer) {
		t.Helper()
		desc, ok := p.Region("target")
		if !ok {
			t.Fatal("no region target")
		}
		src, err := e.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := e.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		copy(src.Bytes(), "after the fallback")
		if err := p.Write(ctx, src.Bytes(), desc.At(0)); err != nil {
			t.Fatal(err)
		}
		if err := p.Read(ctx, dst.Bytes(), desc.At(0)); err != nil || !bytes.Equal(dst.Bytes(), src.Bytes()) {
			t.Fatalf("read back %q, %v", dst.Bytes()[:32], err)
		}
	}
	server := func(t *testing.T, cfg xfer.Config) (*xfer.Engine, *prometheus.Registry, *bytes.Buffer) {
		t.Helper()
		cfg.Listen = "127.0.0.1:0"
		e, reg, logs := open(t, cfg)
		r, err := e.NewRegion(1<<20, xfer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		e.Export("target", r)
		return e, reg, logs
	}

	t.Run("Dialer", func(t *testing.T) {
		srv, _, _ := server(t, withFullTwin(xfer.Config{}, false, false))
		cli, reg, logs := open(t, withFullTwin(xfer.Config{}, true, false))
		p, err := cli.Dial(ctx, srv.Addr())
		if err != nil {
			t.Fatalf("dial with the dialer's device full: %v, want a fallback", err)
		}
		if p.Transport() == twin.Name {
			t.Fatalf("the peer is on %s, whose device is full", p.Transport())
		}
		t.Logf("fell back to %s", p.Transport())
		roundTrip(t, cli, p)
		wantFullFallback(t, "the dialer", cli, reg, logs)
	})

	t.Run("Acceptor", func(t *testing.T) {
		srv, reg, logs := server(t, withFullTwin(xfer.Config{}, false, true))
		cli, _, _ := open(t, withFullTwin(xfer.Config{}, false, false))
		p, err := cli.Dial(ctx, srv.Addr())
		if err != nil {
			t.Fatalf("dial with the acceptor's device full: %v, want a fallback", err)
		}
		if p.Transport() == twin.Name {
			t.Fatalf("the peer is on %s, whose device is full", p.Transport())
		}
		roundTrip(t, cli, p)
		wantFullFallback(t, "the acceptor", srv, reg, logs)
	})

	t.Run("NamedPolicy", func(t *testing.T) {
		srv, _, _ := server(t, withFullTwin(xfer.Config{}, false, false))
		cli, _, _ := open(t, withFullTwin(xfer.Config{Transport: xfer.PolicyTCP}, true, false))
		_, err := cli.Dial(ctx, srv.Addr())
		if !errors.Is(err, xfer.ErrNoRoom) || !strings.Contains(err.Error(), "completion queues") {
			t.Fatalf("dial under policy tcp with the twin full: %v, want ErrNoRoom naming the completion queues", err)
		}
	})
}

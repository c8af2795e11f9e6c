package xfer_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/xfertest"
)

func TestConfigValidation(t *testing.T) {
	ctx := context.Background()
	if _, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicySHM, Memory: "private"}); err == nil || !strings.Contains(err.Error(), "memory private") {
		t.Errorf("shm with private memory: error %v does not name the conflict", err)
	}
	e, err := xfer.Open(ctx, xfer.Config{})
	if err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	defer e.Close()
	if e.Addr() != "" {
		t.Fatal("an engine without Listen has an address")
	}
}

// noDevice is an RDMA device that exists on no host, so that the tests of
// an unusable rdma transport hold on a host with RDMA devices too.
const noDevice = "xfer-no-such-device"

func TestRDMAPolicyFailsClearly(t *testing.T) {
	cfg := xfer.Config{Transport: xfer.PolicyRDMA}
	cfg.RDMA.Device = noDevice
	_, err := xfer.Open(context.Background(), cfg)
	if !errors.Is(err, xfer.ErrNotSupported) || !strings.Contains(err.Error(), "rdma") {
		t.Fatalf("rdma policy with device %s: %v", noDevice, err)
	}
}

func TestAutoNeverPicksUnavailableRDMA(t *testing.T) {
	var cfg xfer.Config
	cfg.RDMA.Device = noDevice
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyAuto, Config: cfg}, "")
	if tr := p.Peer.Transport(); tr == "rdma" {
		t.Fatalf("auto picked %s with device %s", tr, noDevice)
	}
}

// Under auto, a configured rdma device that cannot be opened is not
// ignored in silence: Open warns, counts a fallback (reason unavailable)
// and shows it in the status, and the engine goes on without rdma.
func TestAutoWarnsOfMissingNamedDevice(t *testing.T) {
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	cfg := xfer.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Metrics: reg}
	cfg.RDMA.Device = noDevice
	e, err := xfer.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), noDevice) {
		t.Errorf("no warning that names %s:\n%s", noDevice, logs.String())
	}
	st := e.Status()
	if st.Fallbacks != 1 || len(st.RecentFallbacks) != 1 || st.RecentFallbacks[0].Reason != "unavailable" || st.RecentFallbacks[0].Transport != "rdma" {
		t.Errorf("status: %d fallbacks, recent %+v; want one, rdma unavailable", st.Fallbacks, st.RecentFallbacks)
	}
	var got float64 = -1
	if m := testutil.Metric(t, reg, "xfer_fallbacks_total", "transport", "rdma", "reason", "unavailable"); m != nil {
		got = m.GetCounter().GetValue()
	}
	if got != 1 {
		t.Errorf("xfer_fallbacks_total{transport=rdma,reason=unavailable} = %v, want 1", got)
	}
}

func TestPolicyMismatch(t *testing.T) {
	ctx := context.Background()
	srv, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicySHM})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, err = cli.Dial(ctx, srv.Addr())
	if !errors.Is(err, xfer.ErrNoTransport) || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("shm client to tcp-only server: %v", err)
	}
	if strings.Count(err.Error(), xfer.ErrNoTransport.Error()) != 1 {
		t.Fatalf("the error repeats its kind: %q", err)
	}
}

func TestDialErrors(t *testing.T) {
	e, err := xfer.Open(context.Background(), xfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.Dial(ctx, "127.0.0.1:1"); err == nil {
		t.Fatal("dial of a closed port succeeded")
	}
	if _, err := e.Dial(ctx, "not an address"); err == nil {
		t.Fatal("dial of a bad address succeeded")
	}
}

func TestDialIsCached(t *testing.T) {
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyTCP}, "")
	again, err := p.Client.Dial(context.Background(), p.Server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if again != p.Peer {
		t.Fatal("second Dial made a new peer")
	}
}

func TestRegionDescEncoding(t *testing.T) {
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyTCP}, "")
	d := p.Target.Desc()
	if d.Owner != p.Server.ID() || d.Len != 4<<20 || d.Access != xfer.AccessReadWrite {
		t.Fatalf("descriptor %+v", d)
	}
	b, err := d.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != xfer.RegionDescLen {
		t.Fatalf("binary form of %d bytes, want RegionDescLen = %d", len(b), xfer.RegionDescLen)
	}
	var back xfer.RegionDesc
	if err := back.UnmarshalBinary(b); err != nil || back != d {
		t.Fatalf("binary round trip: %v %+v", err, back)
	}
	// AppendBinary appends the same bytes after what the slice holds.
	prefix := []byte("prefix")
	ab, err := d.AppendBinary(prefix)
	if err != nil || string(ab[:len(prefix)]) != "prefix" || !bytes.Equal(ab[len(prefix):], b) {
		t.Fatalf("AppendBinary: %v, %x after the prefix, want %x", err, ab[len(prefix):], b)
	}
	txt := d.String()
	parsed, err := xfer.ParseRegionDesc(txt)
	if err != nil || parsed != d {
		t.Fatalf("text round trip of %s: %v", txt, err)
	}
	for _, bad := range []string{"", "xfer1:", "xfer1:!!!", "nope:AAAA", txt[:len(txt)-2]} {
		if _, err := xfer.ParseRegionDesc(bad); err == nil {
			t.Errorf("ParseRegionDesc(%q) accepted", bad)
		}
	}
	s, err := d.Slice(4096, 100)
	if err != nil || s.Addr != d.Addr+4096 || s.Len != 100 {
		t.Fatalf("slice: %v %+v", err, s)
	}
	if _, err := d.Slice(d.Len, 1); err == nil {
		t.Fatal("slice past the end accepted")
	}
}

func FuzzParseRegionDesc(f *testing.F) {
	f.Add("xfer1:AQMAAAEAAAAAAAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAEAAAAAAAAAEAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := xfer.ParseRegionDesc(s)
		if err != nil {
			return
		}
		if back, err := xfer.ParseRegionDesc(d.String()); err != nil || back != d {
			t.Fatalf("does not round-trip: %v", err)
		}
	})
}

func TestPoolThroughEngine(t *testing.T) {
	e, err := xfer.Open(context.Background(), xfer.Config{MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a, err := e.Alloc(768 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Alloc(512 << 10); !errors.Is(err, xfer.ErrPoolExhausted) {
		t.Fatalf("overcommit: %v", err)
	}
	// AllocWait gets the memory once it is freed.
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := e.AllocWait(ctx, 512<<10)
		if err == nil {
			err = e.Free(b)
		}
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := e.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := e.Free(a); err == nil {
		t.Fatal("double free accepted")
	}
	// Buffers are views of registered memory: filled in place, sent as is.
	b, _ := e.Alloc(100)
	if b.Region() != e.DefaultRegion() || b.Desc().Len != 100 || b.Remote().Addr != b.Desc().Addr {
		t.Fatal("buffer descriptor does not describe the buffer")
	}
}

// TestIntegrity moves 100,000 transfers of random sizes from 1 B to 4 MiB
// (log-uniform, so every order of magnitude is covered) from 8 goroutines at
// once, each written, read back and checked; in -short mode, 5,000.
func TestIntegrity(t *testing.T) {
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(pol), func(t *testing.T) { integrity(t, pol) })
	}
}

func integrity(t *testing.T, pol xfer.Policy) {
	total := 100_000
	if testing.Short() || raceEnabled {
		total = 5_000
	}
	const workers = 8
	const maxSize = 4 << 20
	p := xfertest.NewPair(t, xfertest.Options{Policy: pol, Config: xfer.Config{MemoryMB: 2*workers*4 + 8}}, "")
	region, err := p.Server.NewRegion(workers*maxSize, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	desc := region.Desc()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, err := p.Client.Alloc(maxSize)
			if err != nil {
				errs <- err
				return
			}
			dst, err := p.Client.Alloc(maxSize)
			if err != nil {
				errs <- err
				return
			}
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range total / workers {
				n := int(math.Exp2(r.Float64() * 22)) // 1 B .. 4 MiB
				n = max(1, min(n, maxSize))
				off := uint64(w*maxSize + r.IntN(maxSize-n+1))
				s := src.Bytes()[:n]
				for j := 0; j < n; j += 8 {
					s[j] = byte(i ^ j ^ w)
				}
				s[n-1] = byte(i)
				if err := p.Peer.Write(ctx, s, desc.At(off)); err != nil {
					errs <- err
					return
				}
				d := dst.Bytes()[:n]
				if err := p.Peer.Read(ctx, d, desc.At(off)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(s, d) || !bytes.Equal(region.Bytes()[off:off+uint64(n)], s) {
					errs <- errors.New("transfer corrupted")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%s: %d transfers checked in %v", pol, total, time.Since(start).Round(time.Millisecond))
}

// WithTransport dials one peer under a policy of its own: an engine under
// auto keeps that peer on tcp, while a Dial without it gets shm from the
// same server; each is cached apart, and a bad policy is an error.
func TestDialWithTransport(t *testing.T) {
	ctx := context.Background()
	srv, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := xfer.Open(ctx, xfer.Config{MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tp, err := cli.Dial(ctx, srv.Addr(), xfer.WithTransport(xfer.PolicyTCP))
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.Transport(); got != "tcp" {
		t.Fatalf("WithTransport(tcp): the peer is on %q", got)
	}
	ap, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if ap == tp || ap.Transport() != "shm" {
		t.Fatalf("a Dial without the option: the same peer (%v) or not shm (%q)", ap == tp, ap.Transport())
	}
	if again, err := cli.Dial(ctx, srv.Addr(), xfer.WithTransport("tcp")); err != nil || again != tp {
		t.Fatalf("a second Dial with tcp: %v, same peer %v", err, again == tp)
	}
	if _, err := cli.Dial(ctx, srv.Addr(), xfer.WithTransport("carrier-pigeon")); err == nil || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("a bad policy: %v", err)
	}
}

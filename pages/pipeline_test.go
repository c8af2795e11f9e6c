package pages

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestPagesPipeline streams random pages of two nodes through a pipeline
// that is kept full, and checks every page, the order, the pipeline's
// errors and the recorded latencies.
func TestPagesPipeline(t *testing.T) {
	for _, policy := range policies(t) {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const size, depth, total = 1 << 20, 8, 300
			c, bufs, srv := newCluster(t, policy, size, depth, 0xa, 0xb)
			a, b := srv[0], srv[1]
			want := func(gpa uint64) []byte {
				s := a
				if gpa >= size {
					s, gpa = b, gpa-size
				}
				return s.Memory()[gpa : gpa+PageSize4K]
			}
			p, err := c.NewPipeline(depth)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.Next(ctx); !errors.Is(err, ErrPipelineEmpty) {
				t.Fatalf("Next of an empty pipeline: %v", err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			var started, taken []uint64
			start := func(buf []byte) {
				t.Helper()
				clear(buf) // a fetch that does nothing must not pass
				g := rng.Uint64N(2*size/PageSize4K) * PageSize4K
				if err := p.Start(g, buf); err != nil {
					t.Fatal(err)
				}
				started = append(started, g)
			}
			began := time.Now()
			for i := range depth {
				start(bufs[i].Bytes())
			}
			if p.InFlight() != depth {
				t.Fatalf("%d in flight, want %d", p.InFlight(), depth)
			}
			if err := p.Start(0, bufs[0].Bytes()); !errors.Is(err, ErrPipelineFull) {
				t.Fatalf("Start on a full pipeline: %v", err)
			}
			for p.InFlight() > 0 {
				g, buf, err := p.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, want(g)) {
					t.Fatalf("fetch %d, GPA %#x: wrong data", len(taken), g)
				}
				taken = append(taken, g)
				if len(started) < total {
					// Bad input is refused and takes no slot.
					if err := p.Start(1, buf); !errors.Is(err, ErrUnaligned) {
						t.Fatalf("unaligned GPA: %v", err)
					}
					if err := p.Start(4*size, buf); !errors.Is(err, ErrNoNode) {
						t.Fatalf("GPA no node owns: %v", err)
					}
					if err := p.Start(0, buf[:8]); !errors.Is(err, ErrBuffer) {
						t.Fatalf("short buffer: %v", err)
					}
					start(buf)
				}
			}
			if len(taken) != total || !equal(taken, started) {
				t.Fatalf("took %d fetches, want the %d started, in order", len(taken), len(started))
			}
			// No fetch took longer than all of them together.
			if l, all := c.Latency(), time.Since(began); l.Count != total || l.P50 <= 0 || l.P99 < l.P50 || l.Max > all {
				t.Fatalf("latency: %+v, want %d fetches recorded, none longer than the %v they all took", l, total, all)
			}
			// A prefetched page comes from the cache, between two READs,
			// and Flush posts what Start queued.
			c.Prefetch(ctx, []uint64{5 * PageSize4K})
			for i, g := range []uint64{size + 3*PageSize4K, 5 * PageSize4K, 9 * PageSize4K} {
				clear(bufs[i].Bytes())
				if err := p.Start(g, bufs[i].Bytes()); err != nil {
					t.Fatal(err)
				}
			}
			p.Flush()
			for range 3 {
				g, buf, err := p.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, want(g)) {
					t.Fatalf("GPA %#x around a cached page: wrong data", g)
				}
			}
			// One failed fetch in a submission fails alone: a good
			// buffer, then one outside registered memory, then a good
			// one, in a new pipeline (one submission, not wrapping).
			p2, err := c.NewPipeline(depth)
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Close()
			for i, b := range [][]byte{bufs[0].Bytes(), make([]byte, PageSize4K), bufs[1].Bytes()} {
				if err := p2.Start(uint64(2+i)*PageSize4K, b); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				g, buf, err := p2.Next(ctx)
				if i == 1 {
					if !errors.Is(err, xfer.ErrNotRegistered) {
						t.Fatalf("a fetch into the heap: %v", err)
					}
					continue
				}
				if err != nil || !bytes.Equal(buf, want(g)) {
					t.Fatalf("fetch %d, in a submission with a failed one: %v", i, err)
				}
			}
			// Closed, the pipeline's latencies stay with the client.
			if err := c.FetchPage(ctx, 0, bufs[0].Bytes()); err != nil {
				t.Fatal(err)
			}
			p.Close()
			p.Close()
			if l := c.Latency(); l.Count != total+3+2+1 {
				t.Fatalf("latency after Close: %d fetches recorded, want %d", l.Count, total+3+2+1)
			}
			c.ResetLatency()
			if l := c.Latency(); l.Count != 0 {
				t.Fatalf("latency after ResetLatency: %+v", l)
			}
			if _, err := c.NewPipeline(0); err == nil {
				t.Fatal("a pipeline of depth 0")
			}
		})
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPagesPipelineAllocs: taking one fetch and starting the next, the
// steady state of a full pipeline, allocates nothing.
func TestPagesPipelineAllocs(t *testing.T) {
	for _, policy := range policies(t) {
		t.Run(string(policy), func(t *testing.T) {
			ctx := context.Background()
			const size, depth = 1 << 20, 4
			s := newServer(t, policy, size, 1)
			c, err := NewClient(ctx, ClientConfig{Engine: engineConfig(t, policy), CachePages: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.AddNode(ctx, s.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			bufs, err := c.Alloc(depth)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Free(bufs)
			p, err := c.NewPipeline(depth)
			if err != nil {
				t.Fatal(err)
			}
			var g uint64
			for i := range depth {
				if err := p.Start(uint64(i)*PageSize4K, bufs[i].Bytes()); err != nil {
					t.Fatal(err)
				}
			}
			step := func() {
				_, buf, err := p.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				g = (g + PageSize4K) % size
				if err := p.Start(g, buf); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 { // warm up
				step()
			}
			if n := testing.AllocsPerRun(500, step); n > 0 {
				t.Errorf("%v allocations per fetch in a full pipeline, want 0", n)
			}
			for p.InFlight() > 0 {
				if _, _, err := p.Next(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPagesPipelineNodeGone: a fetch in flight from a node that goes away
// fails, within its deadline, and leaves the pipeline usable.
func TestPagesPipelineNodeGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, bufs, srv := newCluster(t, xfer.PolicyTCP, 64<<10, 1, 1)
	s := srv[0]
	p, err := c.NewPipeline(1)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	defer fcancel()
	begin := time.Now()
	if err := p.Start(0, bufs[0].Bytes()); err != nil {
		t.Fatal(err)
	}
	g, buf, err := p.Next(fctx)
	if err == nil || g != 0 || &buf[0] != &bufs[0].Bytes()[0] {
		t.Fatalf("a fetch from a closed server: GPA %#x, %v", g, err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Fatalf("the fetch from a closed server took %v, past its 2 s deadline", d)
	}
	if p.InFlight() != 0 {
		t.Fatalf("%d in flight after the failed fetch", p.InFlight())
	}
	t.Logf("pipelined fetch from a closed server: %v", err)
}

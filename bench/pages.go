package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/pages"
)

// PagesResult is the outcome of a pages benchmark run: what `pages bench`
// reports.
type PagesResult struct {
	Transport string  `json:"transport"`
	PageSize  int     `json:"page_size"`
	Depth     int     `json:"depth"`
	Pattern   string  `json:"pattern"`
	Pages     int64   `json:"pages"`
	Seconds   float64 `json:"seconds"`
	PagesPerS float64 `json:"pages_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
	Verified  bool    `json:"verified"`
}

// PagesConfig is what a pages benchmark run does: fetch pages of PageSize
// bytes from the page server at Peer for Duration, Depth fetches in flight.
type PagesConfig struct {
	// Engine configures the client's engine; its pool must hold Depth
	// pages and the client's own.
	Engine   xfer.Config
	Peer     string
	PageSize int
	// Pages: fetch among the first Pages pages (0: all the server's).
	Pages int64
	// Pattern is which pages: "random" or "seq".
	Pattern  string
	Depth    int
	Duration time.Duration
	// Verify checks each page's first 8 bytes hold its offset (a server
	// that stamps its pages).
	Verify bool
}

// Pages runs the pages benchmark pc: one READ per page, with pc.Depth
// fetches in flight (1: one at a time, FetchPage; more: Pipelines that
// share the depth). A page's latency is from the start of its fetch to its
// completion.
func Pages(ctx context.Context, pc PagesConfig) (PagesResult, error) {
	cfg, peer, ps, npages, pattern, depth, duration, verify := pc.Engine, pc.Peer, pc.PageSize, pc.Pages, pc.Pattern, pc.Depth, pc.Duration, pc.Verify
	c, err := pages.NewClient(ctx, pages.ClientConfig{Engine: cfg, PageSize: ps, CachePages: -1})
	if err != nil {
		return PagesResult{}, err
	}
	defer c.Close()
	if err := c.AddNode(ctx, peer, 0); err != nil {
		return PagesResult{}, err
	}
	p, err := c.Engine().Dial(ctx, peer)
	if err != nil {
		return PagesResult{}, err
	}
	desc, _ := p.Region(pages.ExportName)
	total := int64(desc.Len) / int64(ps)
	if npages > total {
		return PagesResult{}, fmt.Errorf("--pages %d: the server at %s has only %d pages of %s: give at most %d, or leave --pages out to fetch among all of them",
			npages, peer, total, bytesize.Format(int64(ps)), total)
	}
	if npages <= 0 {
		npages = total
	}
	bufs, err := c.Alloc(depth)
	if err != nil {
		return PagesResult{}, err
	}
	defer c.Free(bufs)
	pb := make([][]byte, depth)
	for i := range pb {
		pb[i] = bufs[i].Bytes()
	}
	var seq atomic.Int64
	newPicker := func(w int) func() uint64 {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
		return func() uint64 {
			if pattern == "seq" {
				return uint64((seq.Add(1)-1)%npages) * uint64(ps)
			}
			return uint64(rng.Int64N(npages)) * uint64(ps)
		}
	}
	// Warm up the connection before measuring.
	for range 10 {
		if err := c.FetchPage(ctx, 0, pb[0]); err != nil {
			return PagesResult{}, err
		}
	}
	c.ResetLatency()
	var fetched int64
	start := time.Now()
	if depth == 1 {
		next := newPicker(0)
		for time.Since(start) < duration {
			if err := ctx.Err(); err != nil {
				return PagesResult{}, err
			}
			g := next()
			if err := c.FetchPage(ctx, g, pb[0]); err != nil {
				return PagesResult{}, err
			}
			if err := checkPage(verify, g, pb[0]); err != nil {
				return PagesResult{}, err
			}
			fetched++
		}
	} else {
		// depth fetches in flight, in pipelines that share them. On shm
		// (a transport that maps the peer's memory) a fetch is a copy
		// that the fetching goroutine makes: one pipeline per CPU keeps
		// each CPU copying, and a second would only contend for the
		// endpoint's lock (2 pipelines of 16
		// against 4 of 8 on two vCPUs: 9.7-10.0M pages/s against
		// 7.5-10.0M, bimodal, 6 interleaved rounds). Over SoftRoCE a
		// post does the device's work in the posting thread, and a
		// second pipeline per CPU posts while the first polls (4
		// pipelines of 8 against 2 of 16: 14.7-16.3k pages/s against
		// 13.0-14.5k, 3 interleaved rounds).
		perCPU := 2
		if c, _ := xfer.TransportCaps(p.Transport()); c.MapsMemory {
			perCPU = 1
		}
		workers := min(depth, perCPU*runtime.GOMAXPROCS(0))
		var wg sync.WaitGroup
		var total atomic.Int64
		errs := make([]error, workers)
		// The pipelines stop starting fetches when the timer fires: a
		// clock read per fetch would cost as much as a tenth of one on shm.
		var stop atomic.Bool
		tm := time.AfterFunc(duration-time.Since(start), func() { stop.Store(true) })
		defer tm.Stop()
		for w := range workers {
			share := pb[w*depth/workers : (w+1)*depth/workers]
			wg.Go(func() {
				n, err := pipelinePages(ctx, c, share, newPicker(w+1), &stop, verify)
				total.Add(n)
				errs[w] = err
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return PagesResult{}, err
		}
		fetched = total.Load()
	}
	el := time.Since(start)
	l := c.Latency()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return PagesResult{Transport: p.Transport(), PageSize: ps, Depth: depth, Pattern: pattern, Pages: fetched,
		Seconds: el.Seconds(), PagesPerS: float64(fetched) / el.Seconds(),
		P50us: us(l.P50), P99us: us(l.P99), P999us: us(l.P999), MaxUs: us(l.Max), Verified: verify}, nil
}

// pipelinePages keeps len(bufs) fetches in flight in a pipeline of c until
// stop is set, taking the oldest and starting the next, and returns how
// many it fetched.
func pipelinePages(ctx context.Context, c *pages.Client, bufs [][]byte, next func() uint64, stop *atomic.Bool, verify bool) (int64, error) {
	pl, err := c.NewPipeline(len(bufs))
	if err != nil {
		return 0, err
	}
	defer pl.Close()
	var n int64
	for _, b := range bufs {
		if err := pl.Start(next(), b); err != nil {
			return 0, err
		}
	}
	var first error
	for pl.InFlight() > 0 {
		g, buf, err := pl.Next(ctx)
		if err == nil && first == nil {
			err = checkPage(verify, g, buf)
		}
		if err != nil {
			first = cmp.Or(first, err)
			continue // take the rest: their buffers are in flight
		}
		n++
		if first == nil && !stop.Load() {
			if err := pl.Start(next(), buf); err != nil {
				first = err
			}
		}
	}
	return n, first
}

// checkPage checks, with verify, that the page at GPA g (of a server run
// with --stamp) starts with g.
func checkPage(verify bool, g uint64, buf []byte) error {
	if got := binary.LittleEndian.Uint64(buf); verify && got != g {
		return fmt.Errorf("verify: the page at GPA %#x starts with %#x: is the server run with --stamp?", g, got)
	}
	return nil
}

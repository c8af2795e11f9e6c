package main

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/pages"
)

// pagesBanner starts the line `pages serve` prints once it listens.
const pagesBanner = "xfer pages serve: listening on "

func newPagesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pages",
		Short: "Serve and fetch 4 KiB (or 2 MiB) pages with one-sided READs",
		Long: "pages serves a guest-physical address space from registered memory (serve) and\n" +
			"measures fetching its pages, one READ per page (bench). See docs/PAGES.md.",
	}
	cmd.AddCommand(newPagesServeCmd(g), newPagesBenchCmd(g))
	return cmd
}

func parsePageSize(s string) (int, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--page-size %q: %w", s, err)
	}
	if n != pages.PageSize4K && n != pages.PageSize2M {
		return 0, fmt.Errorf("--page-size %s: want 4KiB or 2MiB", s)
	}
	return int(n), nil
}

func newPagesServeCmd(g *globals) *cobra.Command {
	var size, pageSize string
	var stamp, writable bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve an address space of pages until SIGINT or SIGTERM",
		Long: "serve maps and registers --size bytes as a guest-physical address space and serves\n" +
			"its pages to clients' READs; clients may WRITE pages back only with --writable (the address space is\n" +
			"registered read-only otherwise, so that the NIC or the kernel refuses a write). With --directory and --node-id its engine registers\n" +
			"itself (address, transports, exports) and leaves on exit, so that clients find it by node ID. With --stamp each page's first 8 bytes\n" +
			"hold its offset, for `pages bench --verify` (this touches every page). Once it\n" +
			"listens it prints one line to stdout:\n\n  " + pagesBanner + "HOST:PORT",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			if cfg.Listen == "" {
				return errors.New("pages serve needs an address to listen on: --listen HOST:PORT (or :0)")
			}
			n, err := bytesize.Parse(size)
			if err != nil {
				return fmt.Errorf("--size %q: %w", size, err)
			}
			ps, err := parsePageSize(pageSize)
			if err != nil {
				return err
			}
			if cfg.Directory != "" && cfg.Directory != "p2p" && cfg.NodeID == "" {
				return errors.New("--directory needs --node-id: a node registers under its ID")
			}
			cfg.MemoryMB = max(cfg.MemoryMB, 1) // the pages are a region of their own
			ops, err := g.startOps(cmd.Flags())
			if err != nil {
				return err
			}
			defer ops.Close()
			cfg.Metrics = ops.Registerer()
			return servePages(cmd.Context(), g, pages.ServerConfig{Engine: cfg, Size: n, PageSize: ps, Writable: writable}, stamp, ops)
		},
	}
	fs := cmd.Flags()
	fs.String("listen", "", "`address` to accept clients on, e.g. :7472 (required)")
	fs.String("transport", string(xfer.PolicyAuto), "transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.String("secret", "", "shared `secret` clients must know (prefer "+envPrefix+"SECRET)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	fs.StringVar(&size, "size", "1GiB", "size of the address space")
	fs.StringVar(&pageSize, "page-size", "4KiB", "page size: 4KiB or 2MiB")
	directoryFlags(fs)
	fs.BoolVar(&stamp, "stamp", false, "write each page's offset into its first 8 bytes")
	fs.BoolVar(&writable, "writable", false, "let clients write pages back (default: read-only)")
	addOpsFlags(fs)
	return cmd
}

// servePages serves until ctx is done. With a directory and a node ID in
// cfg.Engine, the server's engine registers itself (its exports include the
// address space, "pages", and its size) and leaves when it closes.
func servePages(ctx context.Context, g *globals, cfg pages.ServerConfig, stamp bool, ops *opsServer) error {
	s, err := pages.NewServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if stamp {
		mem := s.Memory()
		for off := 0; off < len(mem); off += s.PageSize() {
			binary.LittleEndian.PutUint64(mem[off:], uint64(off))
		}
	}
	ops.setStatus(func() statusDoc { return engineStatus("pages serve", s.Engine()) })
	ops.setReady(true)
	defer ops.setReady(false)
	fmt.Fprintf(g.stdout, "%s%s\n", pagesBanner, s.Addr())
	<-ctx.Done()
	return nil
}

// pagesResult is what `pages bench` reports.
type pagesResult struct {
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

func newPagesBenchCmd(g *globals) *cobra.Command {
	var peer, dirURL, peerNode, pattern, pageSize string
	var npages int64
	var depth int
	var duration time.Duration
	var asJSON, verify bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Fetch pages from a page server and print latency quantiles and pages/s",
		Long: "bench fetches pages from a page server (--peer ADDR, or --directory URL --peer-node ID)\n" +
			"for --duration: one READ per page, --depth fetches in flight (1: one at a time,\n" +
			"FetchPage; more: Pipelines that share the depth, each starting a fetch as soon\n" +
			"as one completes: one per CPU on shm, where the fetching goroutine copies, two\n" +
			"per CPU otherwise). It prints p50, p99 and p99.9 latency\n" +
			"and pages/s. A page's latency is from the start of its fetch to its completion.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			ps, err := parsePageSize(pageSize)
			if err != nil {
				return err
			}
			if pattern != "random" && pattern != "seq" {
				return fmt.Errorf("--pattern %q: want random or seq", pattern)
			}
			if depth < 1 || depth > 1024 {
				return fmt.Errorf("--depth %d: want 1 to 1024", depth)
			}
			if duration <= 0 {
				return fmt.Errorf("--duration %v: must be positive", duration)
			}
			ctx := cmd.Context()
			switch {
			case peer != "" && peerNode != "":
				return errors.New("--peer and --peer-node both name the server: give one")
			case peer == "" && peerNode == "":
				return errors.New("pages bench needs a server: --peer ADDR, or --directory URL --peer-node ID")
			case peerNode != "":
				if dirURL == "" {
					return errors.New("--peer-node needs --directory URL to look the node up in")
				}
				token, err := cfg.DirectoryToken()
				if err != nil {
					return err
				}
				dirTLS, err := cfg.DirectoryTLS()
				if err != nil {
					return err
				}
				d, err := directory.Open(ctx, dirURL, directory.Options{Logger: g.log, Token: token, TLS: dirTLS})
				if err != nil {
					return err
				}
				e, err := d.Lookup(ctx, peerNode)
				d.Close()
				if err != nil {
					return err
				}
				peer = e.Addrs[0]
			}
			cfg.MemoryMB = max(cfg.MemoryMB, int((int64(depth)*int64(ps)+int64(256)*int64(ps))>>20)+8)
			res, err := benchPages(ctx, cfg, peer, ps, npages, pattern, depth, duration, verify)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(g.stdout).Encode(res)
			}
			fmt.Fprintf(g.stdout, " transport  page    depth  pattern        pages     pages/s   p50 µs   p99 µs  p99.9 µs   max µs\n")
			fmt.Fprintf(g.stdout, " %-9s  %-6s %5d  %-7s %12d %11.0f %8.1f %8.1f %9.1f %8.1f\n",
				res.Transport, bytesize.Format(int64(res.PageSize)), res.Depth, res.Pattern, res.Pages, res.PagesPerS, res.P50us, res.P99us, res.P999us, res.MaxUs)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&peer, "peer", "", "page server `address`")
	fs.StringVar(&dirURL, "directory", "", "directory `URL` to find --peer-node in")
	fs.StringVar(&peerNode, "peer-node", "", "the page server's node `ID` in the directory")
	fs.String("transport", string(xfer.PolicyAuto), "transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.String("secret", "", "shared `secret` of the server (prefer "+envPrefix+"SECRET)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	fs.StringVar(&pageSize, "page-size", "4KiB", "page size: 4KiB or 2MiB (the server's)")
	fs.Int64Var(&npages, "pages", 0, "fetch among the first `N` pages (default: all the server's; more than the server has is an error)")
	fs.StringVar(&pattern, "pattern", "random", "which pages: random or seq")
	fs.IntVar(&depth, "depth", 1, "fetches in flight")
	fs.DurationVar(&duration, "duration", 5*time.Second, "how long to fetch")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object")
	fs.BoolVar(&verify, "verify", false, "check each page's first 8 bytes hold its offset (serve --stamp)")
	return cmd
}

func benchPages(ctx context.Context, cfg xfer.Config, peer string, ps int, npages int64, pattern string, depth int, duration time.Duration, verify bool) (pagesResult, error) {
	c, err := pages.NewClient(ctx, pages.ClientConfig{Engine: cfg, PageSize: ps, CachePages: -1})
	if err != nil {
		return pagesResult{}, err
	}
	defer c.Close()
	if err := c.AddNode(ctx, peer, 0); err != nil {
		return pagesResult{}, err
	}
	p, err := c.Engine().Dial(ctx, peer)
	if err != nil {
		return pagesResult{}, err
	}
	desc, _ := p.Region(pages.ExportName)
	total := int64(desc.Len) / int64(ps)
	if npages > total {
		return pagesResult{}, fmt.Errorf("--pages %d: the server at %s has only %d pages of %s: give at most %d, or leave --pages out to fetch among all of them",
			npages, peer, total, bytesize.Format(int64(ps)), total)
	}
	if npages <= 0 {
		npages = total
	}
	bufs, err := c.Alloc(depth)
	if err != nil {
		return pagesResult{}, err
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
			return pagesResult{}, err
		}
	}
	c.ResetLatency()
	var fetched int64
	start := time.Now()
	if depth == 1 {
		next := newPicker(0)
		for time.Since(start) < duration {
			if err := ctx.Err(); err != nil {
				return pagesResult{}, err
			}
			g := next()
			if err := c.FetchPage(ctx, g, pb[0]); err != nil {
				return pagesResult{}, err
			}
			if err := checkPage(verify, g, pb[0]); err != nil {
				return pagesResult{}, err
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
			return pagesResult{}, err
		}
		fetched = total.Load()
	}
	el := time.Since(start)
	l := c.Latency()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return pagesResult{Transport: p.Transport(), PageSize: ps, Depth: depth, Pattern: pattern, Pages: fetched,
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

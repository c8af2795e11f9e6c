package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bench"
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
	cfg.Engine.HoldPeers = true // clients wait until the pages are stamped
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
	s.Engine().Ready()
	ops.setStatus(func() statusDoc { return engineStatus("pages serve", s.Engine()) })
	ops.setReady(true)
	defer ops.setReady(false)
	fmt.Fprintf(g.stdout, "%s%s\n", pagesBanner, s.Addr())
	<-ctx.Done()
	return nil
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
			res, err := bench.Pages(ctx, bench.PagesConfig{Engine: cfg, Peer: peer, PageSize: ps, Pages: npages, Pattern: pattern, Depth: depth, Duration: duration, Verify: verify})
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

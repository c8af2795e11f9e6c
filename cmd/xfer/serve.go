package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bench"
)

// serveBanner starts the one line serve prints to stdout once it listens;
// the address follows. bench reads it from the serve process it starts.
const serveBanner = "xfer serve: listening on "

// defaultRegionName is the name serve exports its default region under.
const defaultRegionName = "default"

func newServeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a target that peers can write to, read from and send to",
		Long: "serve opens an engine, exports its default region as \"" + defaultRegionName + "\" and accepts peers\n" +
			"until SIGINT or SIGTERM. Messages sent to it are received and discarded. The\n" +
			"region (in host memory) is filled with a pattern first, so READs from it copy\n" +
			"real memory.\n" +
			"With --directory URL and --node-id ID it registers itself (address, transports,\n" +
			"exports) and leaves on exit; `xfer bench --directory URL --peer-node ID` finds it.\n" +
			"Once it is ready (the region exported; peers that connect earlier are held\n" +
			"until then) it prints one line to stdout:\n\n  " + serveBanner + "HOST:PORT",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			ops, err := g.startOps(cmd.Flags())
			if err != nil {
				return err
			}
			defer ops.Close()
			return serve(cmd.Context(), g, cfg, ops)
		},
	}
	fs := cmd.Flags()
	fs.String("listen", "", "`address` to accept peers on, e.g. 127.0.0.1:7471 or :0 (required)")
	fs.String("transport", string(xfer.PolicyAuto), "transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.Int("memory-mb", xfer.DefaultMemoryMB, "size of the registered pool in `MiB`")
	fs.String("memory", "", "`where` the pool lives: cuda:N for GPU N's memory (needs a CUDA driver), or host memory backed by auto, memfd or private (default auto)")
	fs.Int("max-message", xfer.DefaultMaxMessage, "largest message peers may send, in `bytes`")
	fs.String("secret", "", "shared `secret` peers must know (prefer "+envPrefix+"SECRET: flags show in ps)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	directoryFlags(fs)
	addOpsFlags(fs)
	return cmd
}

// serve runs the target until ctx is done.
// With an operations endpoint (ops, which may be nil) the engine's metrics
// and status are served there.
func serve(ctx context.Context, g *globals, cfg xfer.Config, ops *opsServer) error {
	if cfg.Listen == "" {
		return errors.New("serve needs an address to listen on: --listen, listen: in the config file, or " + envPrefix + "LISTEN")
	}
	log := g.log
	cfg.Metrics = ops.Registerer()
	// The port is bound now, but peers are held until the region they ask
	// for is filled and exported (Ready below).
	cfg.HoldPeers = true
	e, err := xfer.Open(ctx, cfg)
	if err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	defer e.Close() // after the explicit Close below this is a no-op
	if r := e.DefaultRegion(); r.Location().IsHost() {
		bench.Populate(r.Bytes()) // READs copy real memory, not the zero page
	}
	e.Export(defaultRegionName, e.DefaultRegion())
	e.Ready()
	ops.setStatus(func() statusDoc { return engineStatus("serve", e) })
	ops.setReady(true)
	defer ops.setReady(false)

	// stdout is not buffered: the line reaches the reader (bench, a script)
	// as soon as Fprintf returns.
	if _, err := fmt.Fprintf(g.stdout, "%s%s\n", serveBanner, e.Addr()); err != nil {
		return fmt.Errorf("write address: %w", err)
	}
	log.Info("serving", "addr", e.Addr(), "transport", cmp.Or(cfg.Transport, xfer.PolicyAuto))

	maxMessage := cfg.MaxMessage
	if maxMessage == 0 {
		maxMessage = xfer.DefaultMaxMessage
	}
	var wg sync.WaitGroup
	wg.Go(func() { drainNotifications(ctx, e, log) })
	for {
		p, err := e.Accept(ctx)
		if ctx.Err() != nil || errors.Is(err, xfer.ErrClosed) {
			break
		}
		if err != nil {
			// A failed handshake (wrong secret, bad peer) ends that peer
			// only. Pause a little so a persistent error cannot spin.
			log.Warn("accept", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		log.Info("peer connected", "transport", p.Transport())
		wg.Go(func() { sink(ctx, e, p, maxMessage, log) })
	}
	log.Info("shutting down")
	wg.Wait()
	if err := e.Close(); err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	return nil
}

// sink receives p's messages into an engine buffer and discards them, until
// p goes away or ctx is done.
func sink(ctx context.Context, e *xfer.Engine, p *xfer.Peer, maxMessage int, log *slog.Logger) {
	defer p.Close()
	buf, err := e.Alloc(maxMessage)
	if err != nil {
		log.Error("allocate receive buffer; the peer cannot send", "bytes", maxMessage, "err", err)
		return
	}
	defer e.Free(buf)
	var msgs, bytes int64
	for {
		n, err := p.Recv(ctx, buf.Bytes())
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, xfer.ErrClosed) {
				log.Warn("receive", "err", err)
			}
			log.Info("peer gone", "messages", msgs, "bytes", bytes)
			return
		}
		msgs++
		bytes += int64(n)
	}
}

// drainNotifications consumes write notifications so that they cannot pile
// up, until ctx is done or the engine is closed. A peer lost is logged,
// and the others' notifications go on.
func drainNotifications(ctx context.Context, e *xfer.Engine, log *slog.Logger) {
	for {
		n, err := e.WaitNotify(ctx)
		var lost *xfer.PeerLostError
		if errors.As(err, &lost) {
			log.Debug("peer lost", "peer", lost.Peer, "err", lost.Err)
			continue
		}
		if err != nil {
			return
		}
		log.Debug("notification", "value", n.Value, "region", n.Region, "len", n.Len)
	}
}

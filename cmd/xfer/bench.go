package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bench"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/cputime"
)

const (
	defaultSizes = "64,4KiB,64KiB,1MiB,16MiB"
	// maxDepth bounds --depth: each worker holds buffers and a histogram
	// of some 200 KiB.
	maxDepth = 256
	// minPoolMB is the smallest default pool bench gives each side.
	minPoolMB = 64
)

// benchFlags are bench's own flags; the engine's (--transport, --memory-mb,
// --secret) go through the configuration.
type benchFlags struct {
	peer     string
	peerNode string
	op       string
	sizes    string
	duration time.Duration
	iters    int64
	depth    int
	verify   bool
	json     bool
	plot     string
}

func newBenchCmd(g *globals) *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure bandwidth, latency and CPU cost of transfers",
		Long: "bench measures write, read or send transfers of each size against a peer, with\n" +
			"--depth operations in flight, and prints a table (or JSON lines) of bandwidth,\n" +
			"latency percentiles and CPU seconds per GB. Its buffers hold a pattern written\n" +
			"before the run (as xfer serve's region does), so operations copy real memory,\n" +
			"never the kernel's shared page of zeros that unwritten memory reads as.\n\n" +
			"Without --peer it starts its own target (xfer serve on 127.0.0.1) and stops it\n" +
			"at the end; CPU time then counts both processes. --directory URL --peer-node ID\n" +
			"finds a running xfer serve by its node ID instead of its address.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plan, err := f.plan(cmd.Flags().Changed("iters"))
			if err != nil {
				return err
			}
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			if err := checkPeerFlags(f.peer, f.peerNode, cfg.Directory); err != nil {
				return err
			}
			ops, err := g.startOps(cmd.Flags())
			if err != nil {
				return err
			}
			defer ops.Close()
			g.ops = ops
			return runBench(cmd.Context(), g, cfg, plan)
		},
	}
	fs := cmd.Flags()
	addOpsFlags(fs)
	fs.StringVar(&f.peer, "peer", "", "`address` of a running xfer serve (default: start one on 127.0.0.1)")
	fs.StringVar(&f.peerNode, "peer-node", "", "node `ID` of a running xfer serve, looked up in --directory")
	fs.String("directory", "", "directory `URL` to find --peer-node in: http://HOST:PORT or etcd://HOST:2379/PREFIX")
	directoryTLSFlags(fs)
	fs.String("transport", string(xfer.PolicyAuto), "transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.StringVar(&f.op, "op", bench.OpWrite, "operation: write, read or send")
	fs.StringVar(&f.sizes, "size", defaultSizes, "comma-separated message `sizes` (64, 4KiB, 1MiB, ...)")
	fs.DurationVar(&f.duration, "duration", 2*time.Second, "how long to run each size")
	fs.Int64Var(&f.iters, "iters", 0, "operations per size, in all (overrides --duration)")
	fs.IntVar(&f.depth, "depth", 4, "operations in flight")
	fs.BoolVar(&f.verify, "verify", false, "check every byte of every operation (write and read only)")
	fs.BoolVar(&f.json, "json", false, "print one JSON object per size instead of the table")
	fs.StringVar(&f.plot, "plot", "", "draw bandwidth and latency against size into `FILE` (.png or .svg)")
	fs.Int("max-message", 0, "largest message in `bytes` (default: the largest --size with --op send, else 64KiB); a --peer must allow as much")
	fs.Int("memory-mb", 0, "registered pool of each side, in `MiB` (default 2 × depth × largest size, at least 64)")
	fs.String("memory", "", "`where` each side's pool lives: cuda:N for GPU N's memory (both sides; GPU memory needs a CUDA driver), or host memory backed by auto, memfd or private (default auto)")
	fs.String("secret", "", "shared `secret` (prefer "+envPrefix+"SECRET: flags show in ps)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	return cmd
}

// benchPlan is the validated form of benchFlags.
type benchPlan struct {
	peer     string
	peerNode string
	op       string
	sizes    []int64
	maxSize  int64
	depth    int
	lim      bench.Limit
	verify   bool
	json     bool
	plot     string
}

// plan validates the flags; itersSet tells whether --iters was given.
func (f benchFlags) plan(itersSet bool) (benchPlan, error) {
	p := benchPlan{peer: f.peer, peerNode: f.peerNode, op: f.op, depth: f.depth, verify: f.verify, json: f.json, plot: f.plot}
	switch f.op {
	case bench.OpWrite, bench.OpRead, bench.OpSend:
	default:
		return p, fmt.Errorf("--op %q: must be write, read or send", f.op)
	}
	if f.verify && f.op == bench.OpSend {
		return p, errors.New("--verify works with write and read")
	}
	var err error
	if p.sizes, err = bytesize.ParseList(f.sizes); err != nil {
		return p, fmt.Errorf("--size: %w", err)
	}
	for _, s := range p.sizes {
		if s < 1 {
			return p, fmt.Errorf("--size: %d: sizes must be at least 1 byte", s)
		}
	}
	p.maxSize = slices.Max(p.sizes)
	if f.depth < 1 || f.depth > maxDepth {
		return p, fmt.Errorf("--depth %d: must be between 1 and %d", f.depth, maxDepth)
	}
	switch {
	case itersSet || f.iters != 0:
		if f.iters < 1 {
			return p, fmt.Errorf("--iters %d: must be at least 1", f.iters)
		}
		p.lim = bench.Limit{Iters: f.iters}
	case f.duration <= 0:
		return p, fmt.Errorf("--duration %v: must be positive", f.duration)
	default:
		p.lim = bench.Limit{Dur: f.duration}
	}
	if f.plot != "" {
		if _, err := plotFormat(f.plot); err != nil {
			return p, err
		}
		if err := checkWritable(f.plot); err != nil {
			return p, fmt.Errorf("--plot %s: %w", f.plot, err)
		}
	}
	return p, nil
}

// defaultPoolMB is the pool each side needs: a buffer (or, verifying, two)
// and a remote slot of the largest size per operation in flight, doubled
// for headroom, in MiB, at least minPoolMB.
func defaultPoolMB(depth int, maxSize int64) int {
	need := 2 * int64(depth) * bench.SlotStride(maxSize)
	return max(minPoolMB, int((need+(1<<20)-1)>>20))
}

// runBench runs the benchmark described by plan with the engine
// configuration cfg, printing results to g.stdout.
func runBench(ctx context.Context, g *globals, cfg xfer.Config, plan benchPlan) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		if err != nil && plan.op == bench.OpSend && errors.Is(err, xfer.ErrTooLarge) {
			// The connection's limit is the smaller of both sides'.
			err = fmt.Errorf("%w\nsends of %s need max_message of at least that on both sides: --max-message %d here, and on the peer xfer serve --max-message %d (or max_message in their configs)",
				err, bytesize.Format(plan.maxSize), plan.maxSize, plan.maxSize)
		}
	}()
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = defaultPoolMB(plan.depth, plan.maxSize)
	}
	if plan.op == bench.OpSend {
		// Both sides must accept messages of the largest size.
		switch {
		case plan.maxSize > xfer.MaxMaxMessage:
			return fmt.Errorf("--op send: size %s is larger than the largest message (%s)", bytesize.Format(plan.maxSize), bytesize.Format(xfer.MaxMaxMessage))
		case cfg.MaxMessage == 0 && plan.maxSize > xfer.DefaultMaxMessage:
			cfg.MaxMessage = int(plan.maxSize)
		case cfg.MaxMessage != 0 && int64(cfg.MaxMessage) < plan.maxSize:
			return fmt.Errorf("--op send: size %s is larger than max_message (%d)", bytesize.Format(plan.maxSize), cfg.MaxMessage)
		}
	}

	addr, cpu := plan.peer, cputime.Meter{}
	if addr == "" && plan.peerNode == "" {
		t, err := startLocalTarget(ctx, g, cfg)
		if err != nil {
			return err
		}
		defer func() {
			if serr := t.stop(); err == nil {
				err = serr
			}
		}()
		addr, cpu.PID = t.addr, t.pid()
	}

	client := cfg
	client.Listen, client.Advertise, client.NodeID = "", "", ""
	client.Metrics = g.ops.Registerer()
	e, err := xfer.Open(ctx, client)
	if err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	defer e.Close()
	g.ops.setStatus(func() statusDoc { return engineStatus("bench", e) })
	g.ops.setReady(true)
	defer g.ops.setReady(false)
	var p *xfer.Peer
	if plan.peerNode != "" {
		addr = "node " + plan.peerNode
		p, err = e.DialNode(ctx, plan.peerNode)
	} else {
		p, err = e.Dial(ctx, addr)
	}
	if err != nil {
		return fmt.Errorf("connect to the peer: %w", err)
	}
	defer p.Close()
	remote, ok := p.Region(defaultRegionName)
	if !ok {
		return fmt.Errorf("peer %s exports no region named %q: is it an xfer serve?", addr, defaultRegionName)
	}
	if need := int64(plan.depth) * bench.SlotStride(plan.maxSize); plan.op != bench.OpSend && need > int64(remote.Len) {
		return fmt.Errorf("--depth %d × %s needs %s in the peer's region, which has %s: give the peer a larger --memory-mb",
			plan.depth, bytesize.Format(plan.maxSize), bytesize.Format(need), bytesize.Format(int64(remote.Len)))
	}
	g.log.Info("bench", "peer", addr, "transport", p.Transport(), "op", plan.op, "depth", plan.depth)

	bufs, err := bench.AllocBuffers(e, plan.depth, plan.maxSize, cfg.MemoryMB)
	if err != nil {
		return err
	}
	if e.DefaultRegion().Location().IsHost() {
		for _, b := range bufs {
			bench.Populate(b)
		}
	}
	var checks [][]byte
	if plan.verify {
		if checks, err = bench.AllocBuffers(e, plan.depth, plan.maxSize, cfg.MemoryMB); err != nil {
			return err
		}
	}
	r := bench.NewRunner(p, plan.op, remote, bufs, checks)
	if !e.DefaultRegion().Location().IsHost() {
		// The buffers are GPU memory: patterns are made and checked in
		// host memory and copied over.
		r.OnDevice(e.Copy, plan.maxSize)
	}

	out := &bench.Writer{W: g.stdout, JSON: plan.json}
	var results []bench.Result
	for _, size := range plan.sizes {
		res, err := r.Measure(ctx, size, plan.lim, cpu, progressOn(g.stderr))
		if err != nil {
			return err
		}
		res.Transport = p.Transport()
		results = append(results, res)
		if err := out.Write(res); err != nil {
			return err
		}
	}
	if cpu.PID == 0 {
		err = out.Note("cpu s/GB counts this process only: the peer %s is external", addr)
	} else {
		err = out.Note("cpu s/GB counts both processes: bench and the serve it started")
	}
	if err == nil && plan.verify {
		err = out.Note("verified: every byte of every operation matched (timings include the checks)")
	}
	if err != nil {
		return err
	}
	if plan.plot != "" {
		return writePlot(plan.plot, results)
	}
	return nil
}

// startLocalTarget starts "xfer serve" on 127.0.0.1 with the same engine
// configuration. The secret goes through the environment, where other
// users cannot read it, rather than the command line.
func startLocalTarget(ctx context.Context, g *globals, cfg xfer.Config) (*target, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start serve: %w", err)
	}
	transport := cfg.Transport
	if transport == "" {
		transport = xfer.PolicyAuto
	}
	args := []string{"serve",
		"--listen", "127.0.0.1:0",
		"--transport", string(transport),
		"--memory-mb", strconv.Itoa(cfg.MemoryMB),
		"--log-level", g.logLevel,
		"--log-format", g.logFormat,
		"--metrics-listen", "", // not this command's address, from its flags, environment or file
	}
	if cfg.MaxMessage != 0 {
		args = append(args, "--max-message", strconv.Itoa(cfg.MaxMessage))
	}
	if !cfg.MemoryDevice.IsHost() {
		args = append(args, "--memory", cfg.MemoryDevice.String())
	} else if cfg.Memory != "" {
		args = append(args, "--memory", string(cfg.Memory))
	}
	if path := g.configFile(); path != "" {
		args = append(args, "--config", path)
	}
	if cfg.SecretFile != "" {
		args = append(args, "--secret-file", cfg.SecretFile)
	}
	env := os.Environ()
	if cfg.Secret != "" {
		env = append(env, envPrefix+"SECRET="+cfg.Secret)
	}
	return startTarget(ctx, exe, args, env, g.log)
}

// checkWritable fails, before a long run, when a file cannot be created at
// path: its directory is missing or not writable. It leaves nothing behind.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".xfer-write-check-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/kv"
)

// kvBanner starts the line kv serve prints to stdout once it listens.
const kvBanner = "xfer kv serve: listening on "

// Defaults of kv serve: gRPC's usual port and a 1 GiB value pool.
const (
	kvDefaultListen   = ":50051"
	kvDefaultMemoryMB = 1024
)

func newKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Run and use the KV service (values move on the data plane, gRPC coordinates)",
		Long: "The KV service stores values in a registered pool. A GET sends the key and a buffer of the\n" +
			"client's registered memory; the server writes the value straight into it. A PUT names the\n" +
			"buffer holding the value and the server reads it. Small values travel inline in the gRPC\n" +
			"messages. See docs/KV.md.",
	}
	cmd.AddCommand(newKVServeCmd(g), newKVPutCmd(g), newKVGetCmd(g), newKVDeleteCmd(g), newKVStatsCmd(g), newKVBenchCmd(g))
	return cmd
}

func newKVServeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a KV server until SIGINT or SIGTERM",
		Long: "serve opens the value pool (--memory-mb), the data-plane engine (--data-listen) and the gRPC\n" +
			"service (--listen), and serves until SIGINT or SIGTERM. Once it listens it prints one line:\n\n  " +
			kvBanner + "HOST:PORT (data plane HOST:PORT)\n\n" +
			"Two addresses, two keys: --listen is the gRPC address; the data-plane engine listens on\n" +
			"--data-listen, or else the config's listen key (XFER_LISTEN), or else the --listen host on\n" +
			"any port. The config file's other engine keys apply to the data plane too.\n\n" +
			"With --directory and --node-id the server registers its node (data-plane address, and the\n" +
			"gRPC address as its kv service) and keeps the entry alive; clients given --directory spread\n" +
			"keys over every server registered there.\n\n" +
			"On a host whose few CPUs the server shares with its clients, run each process with\n" +
			"GOMAXPROCS=1: with one thread per CPU in every process, the kernel's run queue sets the\n" +
			"tail latency. See docs/KV.md, \"Performance\".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fs := cmd.Flags()
			// --listen is the gRPC address, not the engine's listen key.
			cfg, err := g.config(without(fs, "listen"))
			if err != nil {
				return err
			}
			grpcAddr, _ := fs.GetString("listen")
			if !fs.Changed("memory-mb") && cfg.MemoryMB == 0 {
				cfg.MemoryMB = kvDefaultMemoryMB
			}
			dataListen, _ := fs.GetString("data-listen")
			if dataListen == "" {
				dataListen = cfg.Listen
			}
			if dataListen == "" {
				host, _, err := net.SplitHostPort(grpcAddr)
				if err != nil {
					return fmt.Errorf("--listen %q: %w", grpcAddr, err)
				}
				dataListen = net.JoinHostPort(host, "0")
			}
			cfg.Listen = dataListen
			devices, _ := fs.GetInt("devices")
			full, _ := fs.GetString("full")
			policy, err := kv.ParseFullPolicy(full)
			if err != nil {
				return fmt.Errorf("--full: %w", err)
			}
			maxValue, err := sizeFlag(fs, "max-value")
			if err != nil {
				return err
			}
			inlineMax, err := sizeFlag(fs, "inline-max")
			if err != nil {
				return err
			}
			if fs.Changed("inline-max") && inlineMax == 0 {
				inlineMax = -1 // --inline-max 0: never inline
			}
			ops, err := g.startOps(fs)
			if err != nil {
				return err
			}
			defer ops.Close()
			idle, _ := fs.GetDuration("idle-timeout")
			if idle <= 0 {
				return fmt.Errorf("--idle-timeout %v: must be positive", idle)
			}
			diskDir, diskSize, err := kvDiskFlags(g, fs)
			if err != nil {
				return err
			}
			opts := kv.ServerOptions{Engine: cfg, Full: policy, MaxValue: int(maxValue), InlineMax: int(inlineMax), Devices: devices, Logger: g.log,
				Metrics: ops.Registerer(), IdleTimeout: idle, DiskDir: diskDir, DiskSize: diskSize}
			if err := kvSemanticFlags(fs, &opts); err != nil {
				return err
			}
			if opts.TLS, err = kvTLS(fs, true); err != nil {
				return err
			}
			return kvServe(cmd.Context(), g, grpcAddr, opts, ops)
		},
	}
	fs := cmd.Flags()
	fs.String("listen", kvDefaultListen, "gRPC `address` to serve on")
	fs.String("data-listen", "", "data-plane `address` clients connect their engine to (default: the config's listen key, else the --listen host on any port)")
	fs.String("transport", string(xfer.PolicyAuto), "data-plane transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.Int("memory-mb", kvDefaultMemoryMB, "size of the value pool in `MiB`")
	fs.Int("devices", 1, "number of RDMA `devices` (NICs) the data plane uses: one engine over that many rails, the host's first ones unless rdma.devices names them (on tcp or shm: that many engines)")
	fs.String("full", string(kv.Evict), "when the pool is full: evict (least recently used values) or reject (PUT fails)")
	fs.String("max-value", "", "largest value, e.g. 64MiB (default: the pool)")
	fs.String("inline-max", "", fmt.Sprintf("largest value sent inside requests and responses, 0 for never (default %s on tcp, %s on shm and rdma)", bytesize.Format(kv.DefaultInlineMax), bytesize.Format(kv.DefaultInlineMaxSHM)))
	fs.Duration("idle-timeout", kv.DefaultIdleTimeout, "close a client's gRPC connection after this `duration` without a request (the client dials again at its next one); quiet connections are also pinged every 30 s and closed when the ping goes unanswered for 10 s")
	fs.Duration("lease-ttl", kv.DefaultLeaseTTL, "read lease of a GET: for this `duration` the value is not evicted and a delete without --force fails; 0: no leases")
	fs.Duration("soft-pin-ttl", kv.DefaultSoftPinTTL, "how long a soft pin lasts when its put names no TTL (`duration`)")
	fs.Duration("max-soft-pin-ttl", kv.DefaultMaxSoftPinTTL, "longest soft pin a put may ask for (`duration`); a longer one is refused")
	fs.Bool("evict-soft-pinned", true, "evict soft-pinned values, after every unpinned one, when nothing else may go; false: never while their pin lasts")
	fs.Float64("high-watermark", kv.DefaultHighWatermark, "share of the pool (`ratio`, above 0, at most 1) past which a put evicts least recently used values; 1: only when a put does not fit")
	fs.String("disk-dir", "", "`directory` of the disk tier: values eviction would drop are written there, read back by the GETs that want them, and found again after a restart (config: kv.disk_dir)")
	fs.String("disk-size", "", "size of the disk tier's file, e.g. 64GiB, preallocated (config: kv.disk_size; needed with --disk-dir)")
	fs.Float64("eviction-ratio", kv.DefaultEvictionRatio, "least share of the used bytes (`ratio`, 0 to 1) an eviction at the high watermark frees")
	fs.String("secret", "", "shared `secret` of the gRPC and data planes (prefer --secret-file: flags show in ps)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	kvTLSFlags(fs, true)
	directoryFlags(fs)
	addOpsFlags(fs)
	return cmd
}

// kvDiskFlags returns the disk tier's directory and size: --disk-dir and
// --disk-size over the config's kv.disk_dir and kv.disk_size (file, then
// environment).
func kvDiskFlags(g *globals, fs *pflag.FlagSet) (string, int64, error) {
	doc, err := loadSettings(g.configFile(), os.LookupEnv, nil)
	if err != nil {
		return "", 0, err
	}
	dir, size := doc.KVDiskDir, doc.KVDiskSize
	if fs.Changed("disk-dir") {
		dir, _ = fs.GetString("disk-dir")
	}
	if fs.Changed("disk-size") {
		if size, err = sizeFlag(fs, "disk-size"); err != nil {
			return "", 0, err
		}
	}
	if dir == "" && size != 0 {
		return "", 0, fmt.Errorf("--disk-size (kv.disk_size) without --disk-dir (kv.disk_dir): name the directory")
	}
	if dir != "" && size <= 0 {
		return "", 0, fmt.Errorf("--disk-dir %s needs --disk-size (kv.disk_size), e.g. 64GiB", dir)
	}
	return dir, size, nil
}

// kvSemanticFlags sets the lease, pin and eviction options of opts from
// kv serve's flags, refusing values out of range.
func kvSemanticFlags(fs *pflag.FlagSet, opts *kv.ServerOptions) error {
	lease, _ := fs.GetDuration("lease-ttl")
	soft, _ := fs.GetDuration("soft-pin-ttl")
	maxSoft, _ := fs.GetDuration("max-soft-pin-ttl")
	evictSoft, _ := fs.GetBool("evict-soft-pinned")
	hi, _ := fs.GetFloat64("high-watermark")
	ratio, _ := fs.GetFloat64("eviction-ratio")
	switch {
	case lease < 0:
		return fmt.Errorf("--lease-ttl %v: must not be negative (0: no leases)", lease)
	case soft <= 0:
		return fmt.Errorf("--soft-pin-ttl %v: must be positive", soft)
	case maxSoft <= 0:
		return fmt.Errorf("--max-soft-pin-ttl %v: must be positive", maxSoft)
	case soft > maxSoft:
		return fmt.Errorf("--soft-pin-ttl %v is longer than --max-soft-pin-ttl %v", soft, maxSoft)
	case !(hi > 0 && hi <= 1):
		return fmt.Errorf("--high-watermark %v: must be above 0 and at most 1", hi)
	case !(ratio >= 0 && ratio <= 1):
		return fmt.Errorf("--eviction-ratio %v: must be 0 to 1", ratio)
	}
	if lease == 0 {
		lease = -1 // ServerOptions: negative is none, 0 the default
	}
	if ratio == 0 {
		ratio = -1
	}
	opts.LeaseTTL, opts.SoftPinTTL, opts.MaxSoftPinTTL = lease, soft, maxSoft
	opts.KeepSoftPinned, opts.HighWatermark, opts.EvictionRatio = !evictSoft, hi, ratio
	return nil
}

func kvServe(ctx context.Context, g *globals, addr string, opts kv.ServerOptions, ops *opsServer) error {
	s, err := kv.NewServer(ctx, opts)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.Close()
		return fmt.Errorf("listen: %w", err)
	}
	// Listed in the directory before it says it listens (Serve lists it
	// again, which changes nothing).
	if err := s.Advertise(ctx, lis.Addr().String()); err != nil {
		lis.Close()
		s.Close()
		return err
	}
	if _, err := fmt.Fprintf(g.stdout, "%s%s (data plane %s)\n", kvBanner, lis.Addr(), strings.Join(s.DataAddrs(), ", ")); err != nil {
		lis.Close()
		s.Close()
		return err
	}
	ops.setStatus(func() statusDoc { return engineStatus("kv serve", s.Engines()...) })
	ops.setReady(true)
	defer ops.setReady(false)
	st := s.Snapshot()
	g.log.Info("kv serving", "addr", lis.Addr().String(), "data", s.DataAddrs(), "capacity", st.Capacity, "full", st.FullPolicy)
	err = s.Serve(ctx, lis)
	g.log.Info("kv stopped")
	return err
}

func newKVPutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put KEY [VALUE]",
		Short: "Store VALUE, or the contents of --file, under KEY",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, _ := cmd.Flags().GetString("file")
			var value []byte
			switch {
			case file != "" && len(args) == 2:
				return errors.New("give the value or --file, not both")
			case file != "":
				var err error
				if file == "-" {
					value, err = io.ReadAll(cmd.InOrStdin())
				} else {
					value, err = os.ReadFile(file)
				}
				if err != nil {
					return err
				}
			case len(args) == 2:
				value = []byte(args[1])
			default:
				return errors.New("put needs a VALUE or --file")
			}
			bufferMB, _ := cmd.Flags().GetInt("buffer-mb")
			bufferMB = max(bufferMB, len(value)>>20+1)
			var o kv.PutOptions
			fs := cmd.Flags()
			o.HardPin, _ = fs.GetBool("hard-pin")
			o.SoftPin, _ = fs.GetBool("soft-pin")
			if fs.Changed("soft-pin-ttl") {
				o.SoftPin = true
				o.SoftPinTTL, _ = fs.GetDuration("soft-pin-ttl")
				if o.SoftPinTTL <= 0 {
					return fmt.Errorf("--soft-pin-ttl %v: must be positive", o.SoftPinTTL)
				}
			}
			if o.SoftPin && o.HardPin {
				return errors.New("give --soft-pin or --hard-pin, not both")
			}
			return withKVClient(cmd, g, bufferMB, func(ctx context.Context, c kvStore) error {
				return c.PutWith(ctx, args[0], value, o)
			})
		},
	}
	kvClientFlags(cmd.Flags())
	cmd.Flags().String("file", "", "read the value from `file` (- for standard input)")
	cmd.Flags().Bool("soft-pin", false, "pin the value softly: evicted only after every unpinned value, until the pin ends (the server's --soft-pin-ttl)")
	cmd.Flags().Duration("soft-pin-ttl", 0, "soft pin for this `duration` instead (implies --soft-pin); at most the server's --max-soft-pin-ttl")
	cmd.Flags().Bool("hard-pin", false, "pin the value hard: never evicted (a pool full of them refuses puts)")
	return cmd
}

func newKVGetCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Write the value of KEY to stdout or --out; a missing key exits 1 with \"not found\"",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var v []byte
			get := func(ctx context.Context, c kvStore) (err error) {
				v, err = c.Get(ctx, args[0])
				return err
			}
			err := withKVClient(cmd, g, 0, get)
			var small *kv.BufferTooSmallError
			if errors.As(err, &small) && small.Pool {
				// Like put, grow the client's buffer to the value.
				bufferMB, _ := cmd.Flags().GetInt("buffer-mb")
				g.log.Debug("kv get: value larger than --buffer-mb; once more with a larger buffer", "value_bytes", small.Needed, "buffer_mb", bufferMB)
				err = withKVClient(cmd, g, max(bufferMB, int(small.Needed>>20)+1), get)
			}
			if err != nil {
				return err
			}
			if out, _ := cmd.Flags().GetString("out"); out != "" && out != "-" {
				return os.WriteFile(out, v, 0o644)
			}
			_, err = g.stdout.Write(v)
			return err
		},
	}
	kvClientFlags(cmd.Flags())
	cmd.Flags().String("out", "", "write the value to `file` instead of stdout (- for stdout)")
	return cmd
}

func newKVDeleteCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete KEY",
		Short: "Remove KEY; a missing key exits 1 with \"not found\", one read within the lease TTL without --force fails",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			force, _ := cmd.Flags().GetBool("force")
			return withKVClient(cmd, g, 0, func(ctx context.Context, c kvStore) error {
				return c.DeleteWith(ctx, args[0], kv.DeleteOptions{Force: force})
			})
		},
	}
	kvClientFlags(cmd.Flags())
	cmd.Flags().Bool("force", false, "remove the value even while a GET's read lease holds it")
	return cmd
}

func newKVStatsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Print the server's counters (keys, pool use, evictions, rejected PUTs, ...)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKVClient(cmd, g, 1, func(ctx context.Context, c kvStore) error {
				j, _ := cmd.Flags().GetBool("json")
				if cl, ok := c.(*kv.Cluster); ok {
					all, err := cl.Stats(ctx)
					if j {
						if werr := writeJSONLine(g.stdout, all); werr != nil {
							return werr
						}
						return err
					}
					for _, id := range slices.Sorted(maps.Keys(all)) {
						fmt.Fprintf(g.stdout, "node %s\n", id)
						printKVStats(g.stdout, all[id])
					}
					return err
				}
				st, err := kvStats(ctx, c)
				if err != nil {
					return err
				}
				if j {
					return writeJSONLine(g.stdout, st)
				}
				printKVStats(g.stdout, st)
				return nil
			})
		},
	}
	kvClientFlags(cmd.Flags())
	cmd.Flags().Bool("json", false, "print one JSON object")
	return cmd
}

func printKVStats(w io.Writer, st kv.Stats) {
	fmt.Fprintf(w, "keys            %d (%s of values)\n", st.Keys, bytesize.Human(int64(st.ValueBytes)))
	fmt.Fprintf(w, "pool            %s of %s in use, fragmentation %.2f\n", bytesize.Human(int64(st.PoolUsed)), bytesize.Human(int64(st.Capacity)), st.Fragmentation)
	fmt.Fprintf(w, "requests        %d gets (%d hits, %d misses), %d puts, %d deletes\n", st.Gets, st.Hits, st.Misses, st.Puts, st.Deletes)
	fmt.Fprintf(w, "full policy     %s: %d evictions, %d puts rejected\n", st.FullPolicy, st.Evictions, st.RejectedFull)
	fmt.Fprintf(w, "aborted puts    %d\n", st.AbortedPuts)
	fmt.Fprintf(w, "bytes moved     %s on the data plane, %s inline\n", bytesize.Human(int64(st.DataPlaneBytes)), bytesize.Human(int64(st.InlineBytes)))
}

// without returns a flag set with the flags of fs except the named ones,
// for a command whose flag of the same name as a config key means
// something else (kv serve's --listen is the gRPC address).
func without(fs *pflag.FlagSet, names ...string) *pflag.FlagSet {
	out := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(names, f.Name) {
			out.AddFlag(f)
		}
	})
	return out
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv"
)

// kvBanner starts the line kv serve prints to stdout once it listens.
const kvBanner = "xfer kv serve: listening on "

// Defaults of the kv commands: gRPC's usual port, a 1 GiB value pool on
// the server and a 64 MiB buffer pool on each client.
const (
	kvDefaultListen   = ":50051"
	kvDefaultServer   = "127.0.0.1:50051"
	kvDefaultMemoryMB = 1024
	kvDefaultBufferMB = 64
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
			opts := kv.ServerOptions{Engine: cfg, Full: policy, MaxValue: int(maxValue), InlineMax: int(inlineMax), Devices: devices, Logger: g.log,
				Metrics: ops.Registerer(), IdleTimeout: idle}
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
	fs.String("secret", "", "shared `secret` of the gRPC and data planes (prefer --secret-file: flags show in ps)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	kvTLSFlags(fs, true)
	directoryFlags(fs)
	addOpsFlags(fs)
	return cmd
}

func sizeFlag(fs *pflag.FlagSet, name string) (int64, error) {
	s, _ := fs.GetString(name)
	if s == "" {
		return 0, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", name, err)
	}
	return n, nil
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

// kvClientFlags are the flags of the client commands.
func kvClientFlags(fs *pflag.FlagSet) {
	fs.String("server-addr", kvDefaultServer, "KV server `address`: HOST:PORT or http://HOST:PORT")
	fs.String("transport", string(xfer.PolicyAuto), "data-plane transport `policy`: "+policies)
	addOpTimeoutFlag(fs)
	fs.Int("buffer-mb", kvDefaultBufferMB, "size of the client's registered buffer pool in `MiB`")
	fs.Duration("timeout", 30*time.Second, "give up on the command after this `duration`")
	fs.Duration("wait", 0, "wait up to this `duration` for a server that is not up yet (starting or restarting); 0: fail at once when nothing answers")
	fs.Duration("call-timeout", 0, "ride through a server's restart: let each call wait up to this `duration` for a server that is down or does not answer, e.g. 30s, rather than fail it after --reconnect-wait (down) or --op-timeout (silent); for callers that would rather wait than miss; 0: fail fast")
	fs.Duration("idle-timeout", kv.DefaultIdleTimeout, "close a client's gRPC connection after this `duration` without a request (the client dials again at its next one); quiet connections are also pinged every 30 s and closed when the ping goes unanswered for 10 s")
	fs.String("secret", "", "shared `secret` of the data plane (prefer "+envPrefix+"SECRET)")
	fs.String("secret-file", "", "`file` that holds the shared secret (make one with: xfer secret > FILE)")
	kvTLSFlags(fs, false)
	fs.String("requests", kv.RequestsData, "path of GET/PUT/DELETE requests: data (messages on the data-plane connection) or grpc (gRPC calls)")
	fs.String("directory", "", "directory `URL` (http://HOST:PORT or etcd://HOST:2379/PREFIX): without --peer-node, spread keys over every KV server registered there")
	fs.String("peer-node", "", "talk to the KV server of node `ID` in --directory")
	directoryTLSFlags(fs)
}

// kvStore is what the client commands use of a KV server (*kv.Client), or
// of every server registered in a directory (*kv.Cluster).
type kvStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	GetInto(ctx context.Context, key string, buf xfer.Buffer) (int, error)
	Put(ctx context.Context, key string, value []byte) error
	PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) error
	Delete(ctx context.Context, key string) error
	Engine() *xfer.Engine
	Transport() string
	Close() error
}

var (
	_ kvStore = (*kv.Client)(nil)
	_ kvStore = (*kv.Cluster)(nil)
)

// kvStats returns the counters of a server, or the sums over a cluster's.
func kvStats(ctx context.Context, s kvStore) (kv.Stats, error) {
	switch s := s.(type) {
	case *kv.Client:
		return s.Stats(ctx)
	case *kv.Cluster:
		all, err := s.Stats(ctx)
		if err != nil {
			return kv.Stats{}, err
		}
		var sum kv.Stats
		for _, st := range all {
			sum.Keys += st.Keys
			sum.ValueBytes += st.ValueBytes
			sum.Capacity += st.Capacity
			sum.PoolUsed += st.PoolUsed
			sum.FullPolicy = st.FullPolicy
		}
		return sum, nil
	}
	return kv.Stats{}, fmt.Errorf("kv stats: %T", s)
}

// kvTarget says which server the client commands talk to: the address
// --server-addr gives, the node --peer-node names in --directory (its
// entry's kv service), or, with --directory alone, every server registered
// there (cluster is true).
func kvTarget(ctx context.Context, g *globals, fs *pflag.FlagSet, dopts directory.Options) (addr, dirURL string, cluster bool, err error) {
	addr, _ = fs.GetString("server-addr")
	dirURL, _ = fs.GetString("directory")
	peerNode, _ := fs.GetString("peer-node")
	switch {
	case peerNode != "" && dirURL == "":
		return "", "", false, errors.New("--peer-node needs --directory URL to look the node up in")
	case dirURL == "":
		return addr, "", false, nil
	case fs.Changed("server-addr"):
		return "", "", false, errors.New("--server-addr and --directory both name the servers: give one")
	case peerNode == "":
		return "", dirURL, true, nil
	}
	dopts.Logger = g.log
	d, err := directory.Open(ctx, dirURL, dopts)
	if err != nil {
		return "", "", false, err
	}
	defer d.Close()
	e, err := d.Lookup(ctx, peerNode)
	if err != nil {
		return "", "", false, err
	}
	if addr = e.Services[kv.ServiceName]; addr == "" {
		return "", "", false, fmt.Errorf("node %s in %s runs no KV server (its entry lists no %s service)", peerNode, dirURL, kv.ServiceName)
	}
	return addr, dirURL, false, nil
}

// kvDial connects a client with the command's flags and config. A server
// that cannot be reached is an error naming the cause at once, unless
// --wait allows waiting for it; while it waits, a terminal is told why.
// With --directory and no --peer-node the client is a kv.Cluster over
// every server registered there.
func kvDial(cmd *cobra.Command, g *globals, bufferMB int) (kvStore, context.Context, context.CancelFunc, error) {
	cfg, err := g.config(cmd.Flags())
	if err != nil {
		return nil, nil, nil, err
	}
	fs := cmd.Flags()
	if bufferMB == 0 {
		bufferMB, _ = fs.GetInt("buffer-mb")
	}
	cfg.MemoryMB = bufferMB
	cfg.Listen = "" // a client only dials
	token, err := cfg.DirectoryToken()
	if err != nil {
		return nil, nil, nil, err
	}
	dirTLS, err := cfg.DirectoryTLS()
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Directory, cfg.NodeID, cfg.DirectoryTokenFile = "", "", ""
	cfg.DirectoryTLSCert, cfg.DirectoryTLSKey, cfg.DirectoryTLSCA = "", "", ""
	timeout, _ := fs.GetDuration("timeout")
	wait, _ := fs.GetDuration("wait")
	requests, _ := fs.GetString("requests")
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	addr, dirURL, cluster, err := kvTarget(ctx, g, fs, directory.Options{Token: token, TLS: dirTLS})
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	callTimeout, _ := fs.GetDuration("call-timeout")
	opts := kv.ClientOptions{EngineConfig: cfg, Requests: requests, Logger: g.log, FailFast: wait <= 0, CallTimeout: callTimeout}
	if opts.TLS, err = kvTLS(fs, false); err != nil {
		cancel()
		return nil, nil, nil, err
	}
	if cluster {
		c, err := kv.DialCluster(ctx, kv.ClusterOptions{Directory: dirURL, DirectoryToken: token, DirectoryTLS: dirTLS, Client: opts})
		if err != nil {
			cancel()
			return nil, nil, nil, err
		}
		if len(c.Servers()) == 0 {
			c.Close()
			cancel()
			return nil, nil, nil, fmt.Errorf("no KV server is registered in %s (xfer kv serve --directory %s --node-id ID)", dirURL, dirURL)
		}
		return c, ctx, cancel, nil
	}
	dialCtx := ctx
	if wait > 0 {
		var dialCancel context.CancelFunc
		dialCtx, dialCancel = context.WithTimeout(ctx, wait)
		defer dialCancel()
		if isTerminal(g.stderr) {
			last := ""
			opts.OnWait = func(cause error) {
				if msg := cause.Error(); msg != last {
					last = msg
					fmt.Fprintf(g.stderr, "xfer: waiting up to %v for the KV server at %s: %s\n", wait, addr, msg)
				}
			}
		}
	}
	c, err := kv.Dial(dialCtx, addr, opts)
	if err != nil {
		cancel()
		var de *kv.DialError
		if errors.As(err, &de) && de.Waited == 0 && errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, nil, fmt.Errorf("%w (nothing listens there: is `xfer kv serve` running? --wait 30s waits for a server that is starting)", err)
		}
		return nil, nil, nil, err
	}
	return c, ctx, cancel, nil
}

// withKVClient runs f with a client connected by the command's flags, and
// closes it.
func withKVClient(cmd *cobra.Command, g *globals, bufferMB int, f func(context.Context, kvStore) error) error {
	c, ctx, cancel, err := kvDial(cmd, g, bufferMB)
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	return f(ctx, c)
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
			return withKVClient(cmd, g, bufferMB, func(ctx context.Context, c kvStore) error {
				return c.Put(ctx, args[0], value)
			})
		},
	}
	kvClientFlags(cmd.Flags())
	cmd.Flags().String("file", "", "read the value from `file` (- for standard input)")
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
		Short: "Remove KEY; a missing key exits 1 with \"not found\"",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKVClient(cmd, g, 0, func(ctx context.Context, c kvStore) error {
				return c.Delete(ctx, args[0])
			})
		},
	}
	kvClientFlags(cmd.Flags())
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

// kvTLSFlags adds the gRPC plane's TLS flags: a server's certificate (or a
// client's, for mutual TLS) and the authority that signed the other side's.
func kvTLSFlags(fs *pflag.FlagSet, server bool) {
	if server {
		fs.String("tls-cert", "", "serve gRPC over TLS with this certificate `file` (PEM; with --tls-key)")
		fs.String("tls-key", "", "the TLS certificate's key `file` (PEM)")
		fs.String("tls-ca", "", "require client certificates signed by this CA `file` (PEM): mutual TLS")
		return
	}
	fs.String("tls-ca", "", "speak gRPC over TLS, checking the server's certificate against this CA `file` (PEM)")
	fs.String("tls-cert", "", "client certificate `file` for mutual TLS (PEM; with --tls-key)")
	fs.String("tls-key", "", "the client certificate's key `file` (PEM)")
	fs.String("tls-server-name", "", "`name` the server's certificate must carry (default: the host dialed)")
}

// kvTLS builds the TLS configuration the flags ask for, or nil for none.
func kvTLS(fs *pflag.FlagSet, server bool) (*tls.Config, error) {
	get := func(name string) string {
		v, _ := fs.GetString(name)
		return v
	}
	cert, key, ca, name := get("tls-cert"), get("tls-key"), get("tls-ca"), get("tls-server-name")
	if cert == "" && key == "" && ca == "" && name == "" {
		return nil, nil
	}
	return kv.LoadTLS(server, cert, key, ca, name)
}

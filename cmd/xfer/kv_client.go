package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv"
)

// Defaults of the client commands: the server at gRPC's usual port on this
// host, and a 64 MiB buffer pool.
const (
	kvDefaultServer   = "127.0.0.1:50051"
	kvDefaultBufferMB = 64
)

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
	fs.Int("replicas", 1, fmt.Sprintf("with --directory alone: store each put's value on the key's first `N` servers (1 to %d); a get reads the first it reaches, a delete removes it from all", kv.MaxReplicas))
	directoryTLSFlags(fs)
}

// kvStore is what the client commands use of a KV server (*kv.Client), or
// of every server registered in a directory (*kv.Cluster).
type kvStore interface {
	Get(ctx context.Context, key string) ([]byte, error)
	GetInto(ctx context.Context, key string, buf xfer.Buffer) (int, error)
	Put(ctx context.Context, key string, value []byte) error
	PutWith(ctx context.Context, key string, value []byte, o kv.PutOptions) error
	PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) error
	Delete(ctx context.Context, key string) error
	DeleteWith(ctx context.Context, key string, o kv.DeleteOptions) error
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
	if fs.Changed("replicas") && !cluster {
		cancel()
		return nil, nil, nil, errors.New("--replicas needs --directory without --peer-node: a cluster of servers")
	}
	callTimeout, _ := fs.GetDuration("call-timeout")
	opts := kv.ClientOptions{EngineConfig: cfg, Requests: requests, Logger: g.log, FailFast: wait <= 0, CallTimeout: callTimeout}
	if opts.TLS, err = kvTLS(fs, false); err != nil {
		cancel()
		return nil, nil, nil, err
	}
	if cluster {
		replicas, _ := fs.GetInt("replicas")
		c, err := kv.DialCluster(ctx, kv.ClusterOptions{Directory: dirURL, DirectoryToken: token, DirectoryTLS: dirTLS, Client: opts, Replicas: replicas})
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

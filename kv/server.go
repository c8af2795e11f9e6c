package kv

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
)

// Protocol is the version of the KV protocol this package speaks.
const Protocol = 1

// Defaults of ServerOptions.
const (
	DefaultMaxKey = 4 << 10
	// DefaultInlineMax is the largest value that travels inside request
	// and response messages instead of by a one-sided transfer, on tcp:
	// there a WRITE is a second pass through both engines, and inline GETs
	// measured faster up to 32 KiB, and no faster in ops/s at 64 KiB
	// (docs/TUNING.md, "KV inline threshold").
	DefaultInlineMax = 32 << 10
	// DefaultInlineMaxSHM is the default for clients on shm (and rdma),
	// where a one-sided transfer is a single copy (or the NIC's DMA): inline
	// GETs measured faster up to 16 KiB and slower from 32 KiB.
	DefaultInlineMaxSHM = 16 << 10
	// DefaultPollSpin is the poll_spin (xfer.Config.TCP.PollSpin) of the KV
	// service's engines, server and clients, when their configuration
	// leaves it unset: longer than the engine's own default (20 µs)
	// because a reader waits for a whole KV exchange (the request, the
	// lookup, the answer, the other side's next request), which takes
	// longer than a bare round trip; a spin shorter than the exchange burns
	// its length and still pays the wake-up. Measured in docs/TUNING.md
	// ("The KV service's poll_spin").
	DefaultPollSpin = 50 * time.Microsecond
	// DefaultIdleTimeout is how long Serve keeps a client's gRPC
	// connection that has no RPC in flight (ServerOptions.IdleTimeout). A
	// client whose connection was closed dials again at its next call.
	DefaultIdleTimeout = time.Minute
	// DefaultLeaseTTL is how long a GET's read lease lasts
	// (ServerOptions.LeaseTTL): mooncake/master's DefaultLeaseTTL.
	DefaultLeaseTTL = 10 * time.Second
	// DefaultSoftPinTTL is how long a soft pin lasts when its PUT names no
	// TTL, and DefaultMaxSoftPinTTL the longest one a PUT may ask for:
	// Mooncake's --default_kv_soft_pin_ttl and --max_kv_soft_pin_ttl.
	DefaultSoftPinTTL    = 30 * time.Minute
	DefaultMaxSoftPinTTL = 24 * time.Hour
	// DefaultHighWatermark is the share of the pool past which a PUT
	// evicts, and DefaultEvictionRatio the share of the used bytes it then
	// frees: Mooncake's --eviction_high_watermark_ratio and
	// --eviction_ratio.
	DefaultHighWatermark = 0.90
	DefaultEvictionRatio = 0.05
	// MaxReplicas is the most servers a Cluster stores a value on
	// (ClusterOptions.Replicas), as Mooncake's master allows.
	MaxReplicas = 16
	// keepaliveTime and keepaliveTimeout: Serve pings a connection that
	// has been quiet this long, and closes it when the ping is not
	// answered in time: a client that vanished (its host died, a
	// partition) does not hold a connection for the kernel's hours.
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
	// handshakeTimeout bounds a new connection's HTTP/2 handshake: a
	// connection that never speaks gRPC is closed after it.
	handshakeTimeout = 10 * time.Second
	// defaultPeerWait is how long a request waits for its client's
	// data-plane connection to be accepted, which can trail the client's
	// Dial by a moment.
	defaultPeerWait = 5 * time.Second
)

// ServerOptions configures a Server.
type ServerOptions struct {
	// Engine configures the data-plane engine. Its Listen address is the one
	// clients dial (default ":0", any port; Hello tells clients which), and
	// its MemoryMB the size of the value pool. An unset TCP.PollSpin is
	// DefaultPollSpin.
	Engine xfer.Config
	// Full is what a PUT does when the pool is full. Default: Evict.
	Full FullPolicy
	// LeaseTTL is how long a GET's read lease on the value lasts: until it
	// ends, the value is neither evicted nor deleted (a DELETE fails with
	// a *LeaseError unless forced). Each GET renews it. Negative: no
	// leases. Default: DefaultLeaseTTL.
	LeaseTTL time.Duration
	// SoftPinTTL is how long a soft pin lasts when its PUT names no TTL.
	// Default: DefaultSoftPinTTL.
	SoftPinTTL time.Duration
	// MaxSoftPinTTL is the longest soft pin a PUT may ask for; a longer
	// one is refused (ErrInvalid). Default: DefaultMaxSoftPinTTL.
	MaxSoftPinTTL time.Duration
	// KeepSoftPinned keeps soft-pinned values from eviction while their
	// pin lasts (Mooncake's --allow_evict_soft_pinned_objects=false): a
	// pool full of them refuses PUTs with ErrFull. Default: they are
	// evicted, after every unpinned value.
	KeepSoftPinned bool
	// HighWatermark is the share of the pool, 0 to 1, past which a PUT
	// evicts least recently used values (policy Evict), down under it and
	// by at least EvictionRatio of the used bytes; 1: only when a PUT does
	// not fit. Default: DefaultHighWatermark.
	HighWatermark float64
	// EvictionRatio is the least share of the used bytes, 0 to 1, that an
	// eviction at the high watermark frees; negative: 0, only down to the
	// watermark. Default: DefaultEvictionRatio.
	EvictionRatio float64
	// now is the clock of leases and pins, in nanoseconds on a monotonic
	// scale (tests set their own). Default: the monotonic clock.
	now func() int64
	// MaxKey is the longest key in bytes. Default: DefaultMaxKey.
	MaxKey int
	// MaxValue is the largest value in bytes. Default: the pool's capacity.
	MaxValue int
	// InlineMax is the largest value that may travel inline in Get and Put
	// messages; negative means never. Default: DefaultInlineMax, and
	// DefaultInlineMaxSHM for clients on shm and rdma.
	InlineMax int
	// Devices is the number of RDMA devices the data plane uses: with more
	// than one, and a transport policy that admits rdma, the server opens
	// one engine over that many rails (Engine.RDMA.Devices: the first
	// Devices of the host's, unless Engine.RDMA names the devices itself).
	// With tcp or shm it is the number of data-plane engines, separate
	// listeners that clients spread over by engine ID. Default: 1.
	Devices int
	// TLS, when set, makes Serve serve gRPC over TLS with it: a
	// certificate, and ClientCAs with ClientAuth
	// tls.RequireAndVerifyClientCert for mutual TLS (LoadTLS builds one
	// from files). Register leaves that to the grpc.Server. Whether or not,
	// with a secret (Engine.Secret) every call is authenticated both ways
	// (the package doc). Default: none, plain gRPC.
	TLS *tls.Config
	// Logger receives the server's logs. Default: slog.Default().
	Logger *slog.Logger
	// IdleTimeout is how long Serve keeps a client's gRPC connection open
	// with no RPC in flight before it closes it (gracefully, with a
	// GOAWAY); it also bounds the handshake of a new connection, at most
	// 10 s. Serve also pings quiet connections every 30 s and closes
	// those that do not answer in 10 s. Default: DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Metrics, when set, is where the server registers its Prometheus
	// metrics (xfer_kv_*, docs/OPERATIONS.md), and its engines theirs
	// unless Engine.Metrics names another registerer; with more than one
	// engine (Devices on tcp or shm) each engine's carry an engine label,
	// its index.
	// Close unregisters them. Default: nil, no metrics.
	Metrics prometheus.Registerer
	// DiskDir, when set, is the directory of the disk tier: the values
	// eviction would drop are written there (one file of DiskSize bytes,
	// preallocated, private to the server's user), read back by the GETs
	// that want them, and found again when a server on its own restarts
	// (a server in a cluster starts its tier empty). It needs the Evict
	// policy. docs/KV.md, "The disk tier". Default: none.
	DiskDir string
	// DiskSize is the size of the disk tier's file in bytes (needed with
	// DiskDir).
	DiskSize int64
	// DiskInFlight is how many reads and writes the disk tier runs at
	// once. Default: disktier.DefaultInFlight.
	DiskInFlight int
}

// Server is a KV server: a gRPC service (Register it with a grpc.Server, or
// call Serve) backed by an xfer engine that moves the values.
type Server struct {
	kvpb.UnimplementedKVServer

	opts       ServerOptions
	inlineAuto bool           // InlineMax was the default: lower it on shm and rdma
	e          *xfer.Engine   // the first engine; its pool holds the values
	es         []*xfer.Engine // every data-plane engine, e first
	msgs       []*msgBufs     // message buffers of each engine
	st         *store
	id         [16]byte
	log        *slog.Logger
	ctx        context.Context
	stop       context.CancelFunc
	wg         sync.WaitGroup
	peers      peerSet
	auth       *callAuth // authenticates gRPC calls when the engine has a secret
	// peerWait is how long a request waits for its client's data-plane
	// connection (tests shorten it).
	peerWait time.Duration

	gets, hits, misses, puts, deletes atomic.Uint64
	planeBytes, inlineBytes           atomic.Uint64
	planeReqs, inlineReqs             atomic.Uint64 // requests whose value moved each way
	metrics                           prometheus.Collector

	// fence guards the answers of a server in a cluster (set by
	// Advertise); nil: a server on its own.
	fence     atomic.Pointer[fence]
	fenceOnce sync.Once

	closeOnce sync.Once
}

// DataAddr is the address of the first data-plane engine.
func (s *Server) DataAddr() string { return s.e.Addr() }

// DataAddrs are the addresses of the data-plane engines.
func (s *Server) DataAddrs() []string {
	var a []string
	for _, e := range s.es {
		a = append(a, e.Addr())
	}
	return a
}

// Engine is the data-plane engine.
func (s *Server) Engine() *xfer.Engine { return s.e }

// Engines are the data-plane engines, Engine first: one, or with Devices
// on tcp or shm that many.
func (s *Server) Engines() []*xfer.Engine { return append([]*xfer.Engine(nil), s.es...) }

// Register registers the KV service with g. A g made by the caller should
// take the server's transport credentials (grpc.Creds(s.Credentials())):
// without them, xfer clients with a secret cannot connect to it.
func (s *Server) Register(g *grpc.Server) { kvpb.RegisterKVServer(g, s) }

// Credentials are the server's gRPC transport credentials: TLS when
// ServerOptions.TLS is set, and the connection authentication that clients
// with the engine's secret run before their first call (Serve uses them).
func (s *Server) Credentials() credentials.TransportCredentials {
	inner := insecure.NewCredentials()
	if s.opts.TLS != nil {
		inner = credentials.NewTLS(s.opts.TLS)
	}
	return &connCreds{inner: inner, keys: s.auth.keys, e: s.e}
}

// Close closes the data plane and frees every value. Idempotent.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		// Stopping closes every client's connection (serveMessages), which
		// fails the transfers in flight; the goroutines serving requests
		// are done before the engines unmap the memory they use (message
		// buffers, values).
		if s.metrics != nil {
			s.opts.Metrics.Unregister(s.metrics)
		}
		s.stop()
		s.wg.Wait()
		s.st.disk.close(s.st)                 // writes what is only in memory, from the pool
		for i := len(s.es) - 1; i >= 0; i-- { // the first owns the memory
			if cerr := s.es[i].Close(); err == nil {
				err = cerr
			}
		}
		for _, m := range s.msgs {
			m.close()
		}
		s.st.dropAll()
	})
	return err
}

package kv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
	"github.com/xferio/xfer/kv/kvpb"
)

// DefaultGetBuffer is the size of the buffer Get first offers the server.
const DefaultGetBuffer = 1 << 20

// ClientOptions configures a Client.
type ClientOptions struct {
	// Engine is the data-plane engine whose pool holds the client's buffers.
	// Default: the client opens its own with EngineConfig and closes it.
	Engine *xfer.Engine
	// EngineConfig configures the client's own engine (MemoryMB is the
	// buffer pool: the kv commands' --buffer-mb, default 64; an unset TCP.PollSpin
	// is DefaultPollSpin).
	EngineConfig xfer.Config
	// InlineMax is the largest value accepted or sent inline in the gRPC
	// messages (the server's limit applies too); negative means never.
	// Default: the server's limit.
	InlineMax int
	// GetBuffer is the size of the buffer Get first offers; a larger value
	// costs one more round trip. Default: DefaultGetBuffer.
	GetBuffer int
	// DialOptions are added to the gRPC dial. Default: plaintext.
	DialOptions []grpc.DialOption
	// TLS, when set, makes the client speak gRPC over TLS with it: RootCAs
	// to check the server, and a client certificate for mutual TLS
	// (LoadTLS builds one from files). Default: none, plain gRPC.
	TLS *tls.Config
	// Requests is the path GET, PUT and DELETE requests take: RequestsData
	// (the default) sends them as messages on the data-plane connection,
	// RequestsGRPC as gRPC calls. Hello and Stats always use gRPC.
	Requests string
	// DialTimeout bounds Dial when ctx has no deadline of its own: Dial
	// waits that long for a server that is not up yet (it may be starting
	// or restarting), then fails with a *DialError that names the last
	// cause. Default: DefaultDialTimeout; negative: wait until ctx is done.
	DialTimeout time.Duration
	// CallTimeout, when set, makes calls ride through a server's restart:
	// a call (Get, Put, Delete, Stats, ...) waits for a server that is down
	// or does not answer until CallTimeout has passed (or its context's
	// deadline, when it has one), then fails with a *StalledError; a
	// server back before then answers it. Use it where a caller would
	// rather wait out a restart than miss, such as a batch job against a
	// server that is upgraded in place; 3 × op_timeout (30 s) was the
	// default before. Negative: calls wait as long as their context.
	// Default (0): calls fail fast: a server whose address refuses or
	// resets connections fails a call after the client engine's
	// reconnect_wait (2 s; a *DownError), and one that does not answer
	// fails a call without a deadline after the engine's op_timeout (10 s;
	// a *StalledError). A cache's caller wants that: a miss it can
	// recompute, not a stall.
	CallTimeout time.Duration
	// FailFast makes Dial fail at once, with a *DialError naming the cause
	// (connection refused, no such host, not a KV server, ...), when the
	// server cannot be reached, instead of waiting for it.
	FailFast bool
	// OnWait, when set, is called from Dial each time the server could not
	// be reached and Dial is about to try again, with the cause. It lets a
	// program tell its user what it is waiting for. It must not block.
	OnWait func(cause error)
	// Logger receives the client's debug logs (each failed attempt to reach
	// the server). Default: EngineConfig.Logger, or none.
	Logger *slog.Logger
	// Metrics, when set, is where the client registers its Prometheus
	// metrics (xfer_kv_client_*, docs/OPERATIONS.md), and the engine it
	// opens its own unless EngineConfig.Metrics names another registerer.
	// Close unregisters them. Default: nil, no metrics.
	Metrics prometheus.Registerer
}

// DefaultDialTimeout is how long Dial waits for an unreachable server when
// its context has no deadline (ClientOptions.DialTimeout).
const DefaultDialTimeout = 30 * time.Second

// Request paths of ClientOptions.Requests.
const (
	RequestsData = "data"
	RequestsGRPC = "grpc"
)

// Client is a KV client. Its methods are safe for concurrent use. It
// reconnects by itself when the server restarts: a call waits for the
// server for the engine's reconnect_wait (or, with
// ClientOptions.CallTimeout, up to that bound) and fails after it (see
// bound.go).
type Client struct {
	opts    ClientOptions
	target  string
	host    string // the host part of target, for data addresses without one
	conn    *grpc.ClientConn
	rpc     kvpb.KVClient
	e       *xfer.Engine
	ownsEng bool
	// noWait: a call fails at once with ErrUnavailable when the server
	// cannot be reached, instead of waiting for it (a Cluster's servers:
	// the cluster places the key on another).
	noWait bool

	msgs    *msgBufs // request messages (RequestsData)
	log     *slog.Logger
	poolCap uint64 // capacity of the engine's buffer pool

	// dialErr is the last error of a TCP connection attempt to the gRPC
	// server (nil after a success): the real cause behind gRPC's
	// Unavailable status.
	dialErr atomic.Pointer[error]
	dialed  atomic.Bool // a TCP connection to the server was made once
	// helloAnswered: the server answered a Hello once.
	helloAnswered atomic.Bool

	metrics *clientMetrics // nil without ClientOptions.Metrics
	// callTimeout is the call bound (op_timeout, or
	// ClientOptions.CallTimeout); 0: none. calls bounds the calls by it.
	// rideThrough: CallTimeout is set, and calls wait for a server that
	// is down until the bound, not only for reconnect_wait; waitOpt is
	// the gRPC calls' WaitForReady, set then.
	callTimeout time.Duration
	calls       *callbound.Bounder
	rideThrough bool
	waitOpt     grpc.CallOption

	// downSince is when the server's address first refused or reset a
	// connection since the client last reached it, and downTries how
	// many attempts failed since (DownError); zero while it is up.
	downMu    sync.Mutex
	downSince time.Time
	downTries int

	mu   sync.Mutex
	sess *session
}

// Dial connects to the KV server at addr ("host:port" or "http://host:port").
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	target, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("kv: server address %q: %w", addr, err)
	}
	if opts.GetBuffer <= 0 {
		opts.GetBuffer = DefaultGetBuffer
	}
	switch opts.Requests {
	case "":
		opts.Requests = RequestsData
	case RequestsData, RequestsGRPC:
	default:
		return nil, fmt.Errorf("kv: requests %q: must be %s or %s", opts.Requests, RequestsData, RequestsGRPC)
	}
	if _, ok := ctx.Deadline(); !ok && opts.DialTimeout >= 0 {
		timeout := opts.DialTimeout
		if timeout == 0 {
			timeout = DefaultDialTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := &Client{opts: opts, target: target, host: host, e: opts.Engine, log: opts.Logger}
	if opts.Metrics != nil {
		if c.metrics, err = newClientMetrics(opts.Metrics); err != nil {
			return nil, fmt.Errorf("kv: metrics: %w", err)
		}
		if opts.EngineConfig.Metrics == nil {
			opts.EngineConfig.Metrics = opts.Metrics
		}
	}
	if c.log == nil {
		c.log = opts.EngineConfig.Logger
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.e == nil {
		if opts.EngineConfig.TCP.PollSpin == 0 {
			opts.EngineConfig.TCP.PollSpin = DefaultPollSpin
		}
		c.e, err = xfer.Open(ctx, opts.EngineConfig)
		if err != nil {
			c.metrics.unregister(opts.Metrics)
			return nil, fmt.Errorf("kv: client engine: %w", err)
		}
		c.ownsEng = true
	}
	c.poolCap = c.e.Pool().Stats().Capacity
	c.callTimeout = callTimeout(opts, c.e)
	c.calls = callbound.New(c.callTimeout)
	c.rideThrough = opts.CallTimeout != 0
	c.waitOpt = grpc.WaitForReady(c.rideThrough)
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	if secret := c.e.Config().Secret; secret != "" {
		// Each connection authenticates once, when gRPC opens it; its
		// calls then carry nothing (connauth.go).
		creds = &connCreds{inner: creds, keys: newCallKeys(secret)}
	}
	dopts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(c.dialTCP),
		// Reconnect to a restarted server within a second or two, not
		// gRPC's default of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts.DialOptions...)
	c.conn, err = grpc.NewClient("passthrough:///"+target, dopts...)
	if err != nil {
		c.closeEngine()
		c.metrics.unregister(opts.Metrics)
		return nil, fmt.Errorf("kv: %w", err)
	}
	c.rpc = kvpb.NewKVClient(c.conn)
	if opts.Requests == RequestsData {
		// Messages as large as the engine allows (max_message), up to 1 MiB:
		// that bounds the inline values this client accepts.
		size := min(c.e.Config().MaxMessage, 1<<20)
		if size < msgSize(DefaultMaxKey, 0) {
			c.conn.Close()
			c.closeEngine()
			c.metrics.unregister(opts.Metrics)
			return nil, fmt.Errorf("kv: the engine's max_message (%d) is below the %d bytes a request needs", size, msgSize(DefaultMaxKey, 0))
		}
		if c.msgs, err = newMsgBufs(c.e, clientMsgBufs, size); err != nil {
			c.conn.Close()
			c.closeEngine()
			c.metrics.unregister(opts.Metrics)
			return nil, err
		}
	}
	if err := c.connect(ctx, addr); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// dialTCP is the gRPC channel's dialer: a plain TCP dial that remembers its
// error, which gRPC only reports as text inside an Unavailable status.
func (c *Client) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.dialErr.Store(&err)
		return nil, err
	}
	c.dialErr.Store(nil)
	c.dialed.Store(true)
	return nc, nil
}

// connect establishes the first session, trying again while the server is
// unreachable (unless FailFast) until ctx is done. Every failed attempt is
// logged at debug level and passed to OnWait.
func (c *Client) connect(ctx context.Context, addr string) error {
	start := time.Now()
	pause := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := c.session(ctx)
		if err == nil {
			if attempt > 1 {
				c.log.Debug("kv: server reached", "addr", addr, "attempts", attempt, "after", time.Since(start))
			}
			return nil
		}
		if !errors.Is(err, ErrUnavailable) {
			if cerr := ctx.Err(); cerr != nil {
				// The server accepted the connection but did not answer.
				return &DialError{Addr: addr, Waited: time.Since(start), Attempts: attempt, Cause: c.cause(err), Ctx: cerr}
			}
			return err
		}
		cause := c.cause(err)
		c.log.Debug("kv: server unreachable", "addr", addr, "attempt", attempt, "err", cause)
		if c.opts.FailFast {
			return &DialError{Addr: addr, Attempts: attempt, Cause: cause}
		}
		if c.opts.OnWait != nil {
			c.opts.OnWait(cause)
		}
		select {
		case <-ctx.Done():
			return &DialError{Addr: addr, Waited: time.Since(start), Attempts: attempt, Cause: cause, Ctx: ctx.Err()}
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// cause is the real reason behind an unavailable server: the TCP dial's
// error when the connection could not be made, or what gRPC said, with a
// hint when something answers that is not a gRPC server.
func (c *Client) cause(err error) error {
	if p := c.dialErr.Load(); p != nil {
		return *p
	}
	var ue *unavailableError
	if errors.As(err, &ue) && c.dialed.Load() && !c.helloAnswered.Load() {
		return fmt.Errorf("%s accepts connections but does not answer as a KV server (gRPC): %s", c.target, ue.msg)
	}
	return err
}

// ParseAddr accepts "host:port" and the URL form "http://host:port" and
// returns host:port.
func ParseAddr(addr string) (string, error) {
	a := strings.TrimSpace(addr)
	switch {
	case strings.HasPrefix(a, "https://"):
		return "", fmt.Errorf("kv: server address %q: https (TLS) is not supported yet; use http://HOST:PORT or HOST:PORT", addr)
	case strings.HasPrefix(a, "http://"):
		a = strings.TrimSuffix(strings.TrimPrefix(a, "http://"), "/")
	}
	if strings.Contains(a, "/") {
		return "", fmt.Errorf("kv: server address %q: want HOST:PORT or http://HOST:PORT", addr)
	}
	if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
		return "", fmt.Errorf("kv: server address %q: want HOST:PORT or http://HOST:PORT", addr)
	}
	return a, nil
}

// Engine is the client's data-plane engine; buffers for GetInto and
// PutBuffer come from its pool (Engine().Alloc).
func (c *Client) Engine() *xfer.Engine { return c.e }

// Transport names the data-plane transport in use ("" before the first
// connection).
func (c *Client) Transport() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return ""
	}
	return c.sess.peer.Transport()
}

// Close closes the gRPC connection and, when the client opened it, its
// engine.
func (c *Client) Close() error {
	err := c.conn.Close()
	c.calls.Stop()
	c.mu.Lock()
	if c.sess != nil {
		c.sess.peer.Close()
		c.sess = nil
	}
	c.mu.Unlock()
	if c.msgs != nil {
		c.msgs.close()
	}
	if cerr := c.closeEngine(); err == nil {
		err = cerr
	}
	c.metrics.unregister(c.opts.Metrics)
	return err
}

func (c *Client) closeEngine() error {
	if c.ownsEng {
		return c.e.Close()
	}
	return nil
}

package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
	"github.com/xferio/xfer/kv/kvpb"
)

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
		if opts.msgs != nil {
			// A Cluster's: this client takes at most clientMsgBufs of them.
			c.msgs, c.msgShare = opts.msgs, make(chan struct{}, clientMsgBufs)
		} else if c.msgs, err = newRequestBufs(c.e, clientMsgBufs); err != nil {
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

// newRequestBufs returns n buffers for a client's request messages, as
// large as e allows (max_message), up to 1 MiB: that bounds the inline
// values the client accepts.
func newRequestBufs(e *xfer.Engine, n int) (*msgBufs, error) {
	size := min(e.Config().MaxMessage, 1<<20)
	if size < msgSize(DefaultMaxKey, 0) {
		return nil, fmt.Errorf("kv: the engine's max_message (%d) is below the %d bytes a request needs", size, msgSize(DefaultMaxKey, 0))
	}
	return newMsgBufs(e, n, size)
}

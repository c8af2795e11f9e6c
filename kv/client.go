package kv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/callbound"
	"github.com/xferio/xfer/kv/kvpb"
)

// Errors of the client's methods; match them with errors.Is. The messages
// of the server's errors are kept.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("not found")
	// ErrFull: the server's pool has no room for the value.
	ErrFull = errors.New("server pool full")
	// ErrInvalid: the request was refused (empty or oversized key or value,
	// a buffer outside the client's registered memory).
	ErrInvalid = errors.New("invalid request")
	// ErrUnavailable: the server could not be reached in time.
	ErrUnavailable = errors.New("server unavailable")
	// ErrMoved: a server of a cluster refused a write because it does not
	// own the key now (the placement is changing, or it is rejoining, or
	// it lost touch with the directory). A Cluster looks again and retries
	// by itself, for ClusterOptions.PlacementWait.
	ErrMoved = errors.New("key not writable on this server now")
)

// unavailableError is gRPC's Unavailable status: the server could not be
// reached, msg says why.
type unavailableError struct{ target, msg string }

func (e *unavailableError) Error() string {
	return fmt.Sprintf("kv: %s: %s: %v", e.target, e.msg, ErrUnavailable)
}
func (e *unavailableError) Unwrap() error { return ErrUnavailable }

// serverError is a refusal by the server: its message, matching kind.
type serverError struct {
	msg  string
	kind error
}

func (e *serverError) Error() string { return "kv: " + e.msg }
func (e *serverError) Unwrap() error { return e.kind }

// BufferTooSmallError is returned by GetInto when the value does not fit the
// buffer, and by Get when it does not fit the client's whole buffer pool
// (Pool set). Needed is the value's size.
type BufferTooSmallError struct {
	Needed, Have uint64
	// Pool: Have is the capacity of the client's buffer pool
	// (EngineConfig.MemoryMB), which the value exceeds.
	Pool bool
}

func (e *BufferTooSmallError) Error() string {
	if e.Pool {
		return fmt.Sprintf("kv: value is %d bytes, larger than the client's buffer pool of %d bytes: give the client a pool of at least %d MiB (EngineConfig.MemoryMB)",
			e.Needed, e.Have, e.Needed>>20+1)
	}
	return fmt.Sprintf("value is %d bytes and the buffer holds %d: a buffer of at least %d bytes is needed", e.Needed, e.Have, e.Needed)
}

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
	// CallTimeout bounds each call (Get, Put, Delete, Stats, ...) whose
	// context has no deadline: a server that does not answer within it,
	// because it stopped, hung or died, fails the call with a
	// *StalledError that names it, after between CallTimeout and 9/8 of
	// it (calls that start close together share one timer). A context's
	// deadline, when there is one, bounds the call instead. Default: CallTimeoutFactor × the
	// client engine's op_timeout (30 s by default; none when op_timeout is
	// negative); negative: none, a call waits as long as its context.
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

// DialError is Dial's error when the server could not be reached: nothing
// listens at the address, the name does not resolve, what answers is not a
// KV server, or its data plane cannot be connected. It matches
// ErrUnavailable, the cause (for example syscall.ECONNREFUSED) and, when
// Dial gave up waiting, the context's error.
type DialError struct {
	// Addr is the server address as given to Dial.
	Addr string
	// Waited is how long Dial tried; zero when it failed at once.
	Waited time.Duration
	// Attempts is how many times Dial tried to reach the server.
	Attempts int
	// Cause is the last reason the server could not be reached.
	Cause error
	// Ctx is the context's error when Dial gave up waiting, or nil.
	Ctx error
}

func (e *DialError) Error() string {
	if e.Waited > 0 {
		return fmt.Sprintf("kv: no KV server at %s within %v (%d attempts): %v", e.Addr, e.Waited.Round(time.Millisecond), e.Attempts, e.Cause)
	}
	return fmt.Sprintf("kv: no KV server at %s: %v", e.Addr, e.Cause)
}

func (e *DialError) Unwrap() []error {
	errs := []error{ErrUnavailable, e.Cause}
	if e.Ctx != nil {
		errs = append(errs, e.Ctx)
	}
	return errs
}

// Request paths of ClientOptions.Requests.
const (
	RequestsData = "data"
	RequestsGRPC = "grpc"
)

// Client is a KV client. Its methods are safe for concurrent use. It
// reconnects by itself when the server restarts: calls wait for the server
// until their context is done.
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
	// callTimeout is the call bound (ClientOptions.CallTimeout); 0: none.
	// calls bounds the calls by it.
	callTimeout time.Duration
	calls       *callbound.Bounder

	mu   sync.Mutex
	sess *session
}

// session is what a Hello established: the server's limits and the
// data-plane connection to it.
type session struct {
	id        string
	addr      string // the data address dialed
	peer      *xfer.Peer
	inlineMax uint64
	maxValue  uint64
	maxKey    uint64

	// The data-plane request path: calls waiting for their response.
	pmu     sync.Mutex
	pending map[uint64]*pendingCall
	nextID  uint64
	down    error // set when the connection failed; calls fail with it
}

// pendingCall is a data-plane request waiting for its response. A call
// abandoned by its caller (context done) stays until the response comes,
// so that late runs after the server is done with the caller's buffer.
type pendingCall struct {
	ch   chan *kvpb.Response // nil response: the connection failed
	late func()
	dst  []byte // where an inline GET value goes
	// notify: a GET that asked to be answered by a notification
	// (GetRequest.notify, onNotify).
	notify bool

	// size, when not 0, bounds the encoded request: callWith then tries
	// to encode it straight into the transport's send queue, with enc and
	// id, through fill (pc.appendRequest, bound once).
	size int
	enc  func(b []byte, id uint64) []byte
	id   uint64
	fill func(b []byte) []byte

	// A pooled call's request, for enc = encGet or encPut (bound once, so
	// that a GET or an inline PUT builds no closure): the key, the
	// buffer's descriptor (GET) or the value (PUT), the largest inline
	// answer (GET) and the server's ID. The caller clears them before it
	// puts the call back.
	key, reqBytes, sid []byte
	inlineMax          uint64
	encGet, encPut     func(b []byte, id uint64) []byte

	// A response of the fast path is decoded into these, without
	// allocating. The caller of a pooled call (GETs, inline PUTs) is done
	// with them before it puts the call back.
	desc    [xfer.RegionDescLen]byte // the request's buffer descriptor
	resp    kvpb.Response
	wrap    kvpb.Response_Get
	get     kvpb.GetResponse
	wrapPut kvpb.Response_Put
	put     kvpb.PutResponse
}

// requestSize bounds the encoded size of a GET or inline PUT request
// whose fields (key, buffer descriptor or value, server id) are that long:
// each field, and the id and the operation's header, take at most a tag and
// a 10-byte varint besides their bytes.
func requestSize(fields ...int) int {
	n := 2 * (1 + 10)
	for _, f := range fields {
		n += 1 + 10 + f
	}
	return n + 2*(1+10) // inline max, or room to spare
}

// callPool holds the pendingCalls of GETs and inline PUTs, each with its
// channel.
var callPool = sync.Pool{New: func() any {
	pc := &pendingCall{ch: make(chan *kvpb.Response, 1)}
	pc.fill, pc.encGet, pc.encPut = pc.appendRequest, pc.appendGet, pc.appendPut
	return pc
}}

// appendGet appends the call's GET request (a pooled call's fields).
func (pc *pendingCall) appendGet(b []byte, id uint64) []byte {
	return appendGetRequest(b, id, pc.key, pc.reqBytes, pc.inlineMax, pc.sid, true)
}

// appendPut appends the call's inline PUT request.
func (pc *pendingCall) appendPut(b []byte, id uint64) []byte {
	return appendPutRequest(b, id, pc.key, pc.reqBytes, pc.sid)
}

// clearRequest drops what a pooled call's request referred to.
func (pc *pendingCall) clearRequest() {
	pc.key, pc.reqBytes, pc.sid, pc.inlineMax = nil, nil, nil, 0
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

// session returns the current session, establishing one when there is none.
func (c *Client) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil {
		return c.sess, nil
	}
	// Not WaitForReady: while the server is unreachable Hello fails at
	// once with Unavailable, and the callers (connect, retry) wait and try
	// again, knowing why.
	h, err := c.rpc.Hello(ctx, &kvpb.HelloRequest{Protocol: Protocol})
	if err != nil {
		return nil, c.convert(err)
	}
	c.helloAnswered.Store(true)
	if len(h.DataAddrs) == 0 {
		return nil, fmt.Errorf("kv: %s: the server has no data-plane address", c.target)
	}
	// Spread clients over the server's data-plane engines.
	f := fnv.New32a()
	id := c.e.ID()
	f.Write(id[:])
	addr := c.dataAddr(h.DataAddrs[int(f.Sum32())%len(h.DataAddrs)])
	p, err := c.e.Dial(ctx, addr)
	if err != nil {
		if errors.Is(err, xfer.ErrAuth) || errors.Is(err, xfer.ErrNoTransport) || errors.Is(err, xfer.ErrVersion) || ctx.Err() != nil {
			return nil, fmt.Errorf("kv: data plane %s: %w", addr, err)
		}
		// Most likely the server is restarting: worth another Hello.
		return nil, fmt.Errorf("kv: data plane %s: %w: %w", addr, ErrUnavailable, err)
	}
	c.sess = &session{id: string(h.ServerId), addr: addr, peer: p, inlineMax: h.InlineMax, maxValue: h.MaxValue, maxKey: h.MaxKey}
	if m, ok := h.InlineMaxByTransport[p.Transport()]; ok {
		c.sess.inlineMax = min(c.sess.inlineMax, m)
	}
	if c.opts.InlineMax < 0 {
		c.sess.inlineMax = 0
	} else if c.opts.InlineMax > 0 {
		c.sess.inlineMax = min(c.sess.inlineMax, uint64(c.opts.InlineMax))
	}
	if c.msgs != nil {
		// Requests carry at most a key and an inline value.
		c.sess.inlineMax = min(c.sess.inlineMax, uint64(max(c.msgs.size-1024-int(h.MaxKey), 0)))
		c.sess.pending = make(map[uint64]*pendingCall)
		sess := c.sess
		p.Handle(func(msg []byte) { c.onResponse(sess, msg) })
		p.HandleNotify(func(n xfer.Notification) { c.onNotify(sess, n) })
	}
	return c.sess, nil
}

// dataAddr fills in the host of a data address that has none.
func (c *Client) dataAddr(a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return a
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(c.host, port)
	}
	return a
}

// reset drops sess, after the server said it does not know this client's
// data-plane connection or it broke; the next call says Hello again.
func (c *Client) reset(sess *session) {
	c.mu.Lock()
	if c.sess == sess {
		c.sess = nil
		sess.peer.Close()
	}
	c.mu.Unlock()
}

// retry runs f with a session until it succeeds, fails for a reason other
// than the server's unavailability, or ctx is done.
func (c *Client) retry(ctx context.Context, f func(*session) error) error {
	backoff := 10 * time.Millisecond
	for {
		sess, err := c.session(ctx)
		if err == nil {
			err = f(sess)
			if err == nil {
				return nil
			}
			err = c.convert(err)
			if !errors.Is(err, ErrUnavailable) {
				return err
			}
			c.reset(sess)
		}
		if !errors.Is(err, ErrUnavailable) && !errors.Is(err, xfer.ErrClosed) && !errors.Is(err, xfer.ErrPeerLost) {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("kv: %w", cerr)
			}
			return err
		}
		if c.noWait {
			if errors.Is(err, ErrUnavailable) {
				return err
			}
			return &unavailableError{target: c.target, msg: err.Error()}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kv: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// convert maps a gRPC status to the package's errors.
func (c *Client) convert(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.NotFound:
		return &serverError{msg, ErrNotFound}
	case codes.ResourceExhausted:
		return &serverError{msg, ErrFull}
	case codes.InvalidArgument:
		return &serverError{msg, ErrInvalid}
	case codes.Unavailable:
		if reason, ok := authRefused(msg); ok {
			return fmt.Errorf("kv: %s: %w: %s", c.target, xfer.ErrAuth, reason)
		}
		return &unavailableError{target: c.target, msg: msg}
	case codes.Aborted:
		return &serverError{msg, ErrMoved}
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if b, ok := d.(*kvpb.BufferTooSmall); ok {
				return &BufferTooSmallError{Needed: b.Needed, Have: b.Have}
			}
		}
	case codes.Unauthenticated:
		return fmt.Errorf("kv: %w: %s", xfer.ErrAuth, strings.TrimPrefix(msg, "kv: "))
	case codes.Canceled:
		return fmt.Errorf("kv: %w", context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("kv: %w", context.DeadlineExceeded)
	}
	return fmt.Errorf("kv: %s: %s", st.Code(), msg)
}

func (c *Client) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("kv: empty key: %w", ErrInvalid)
	}
	return nil
}

// Get returns the value of key in a new slice. The server writes it into a
// buffer of the client's pool (or returns it inline when it is small), and
// Get copies it out; GetInto avoids the copy.
func (c *Client) Get(ctx context.Context, key string) (_ []byte, err error) {
	if c.metrics != nil {
		defer c.metrics.done(cGet, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	v, err := c.getValue(ctx, key)
	return v, c.bounded(ctx, "get", err)
}

// getValue is Get.
func (c *Client) getValue(ctx context.Context, key string) ([]byte, error) {
	size := c.opts.GetBuffer
	if uint64(size) > c.poolCap {
		size = int(c.poolCap)
	}
	for {
		buf, err := c.e.AllocWait(ctx, size)
		if err != nil {
			return nil, fmt.Errorf("kv: get buffer of %d bytes: %w", size, err)
		}
		var out []byte
		n, inline, _, err := c.get(ctx, key, buf, true, func() { c.e.Free(buf) })
		if errors.Is(err, errLate) {
			return nil, err // buf is freed once the server is done with it
		}
		if err == nil {
			if inline != nil {
				out = inline
			} else {
				out = append([]byte(nil), buf.Bytes()[:n]...)
			}
		}
		c.e.Free(buf)
		var small *BufferTooSmallError
		if errors.As(err, &small) && int(small.Needed) > size {
			if small.Needed > c.poolCap {
				return nil, &BufferTooSmallError{Needed: small.Needed, Have: c.poolCap, Pool: true}
			}
			size = int(small.Needed) // it grew meanwhile: try again
			continue
		}
		return out, err
	}
}

// GetInto has the server write the value of key straight into buf, a buffer
// of the client's engine (Engine().Alloc), and returns its length. A value
// larger than buf gets a *BufferTooSmallError that states the size needed.
func (c *Client) GetInto(ctx context.Context, key string, buf xfer.Buffer) (_ int, err error) {
	if c.metrics != nil {
		defer c.metrics.done(cGet, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	n, _, _, err := c.get(ctx, key, buf, false, nil)
	return n, c.bounded(ctx, "get", err)
}

// get runs one GET into buf. With wantInline, an inline value is returned in
// a slice of its own instead of being copied into buf.
//
// If ctx ends while the server may still write into buf, and late is not
// nil, get returns an error matching errLate and runs late once the server
// is done with buf.
func (c *Client) get(ctx context.Context, key string, buf xfer.Buffer, wantInline bool, late func()) (n int, inline []byte, ver uint64, err error) {
	if c.msgs != nil {
		// The data-plane request path, without a GetRequest: the request
		// is encoded straight into the message, and the call (with room
		// for its response) comes from a pool.
		err = c.retry(ctx, func(s *session) error {
			inlineMax := min(s.inlineMax, uint64(buf.Len()))
			pc := callPool.Get().(*pendingCall)
			pc.dst, pc.notify = buf.Bytes(), true
			desc, err := buf.Desc().AppendBinary(pc.desc[:0])
			if err != nil {
				return err
			}
			pc.size = requestSize(len(key), len(desc), len(s.id))
			pc.key, pc.reqBytes, pc.inlineMax = unsafe.Slice(unsafe.StringData(key), len(key)), desc, inlineMax
			pc.sid = unsafe.Slice(unsafe.StringData(s.id), len(s.id))
			r, done, err := c.callWith(ctx, s, pc, pc.encGet, late)
			if err == nil {
				// An inline value is in buf already (onResponse).
				n, ver = int(r.GetGet().GetLength()), r.GetGet().GetVersion()
			}
			if done {
				pc.clearRequest()
				pc.dst, pc.late, pc.size, pc.notify = nil, nil, 0, false
				callPool.Put(pc)
			}
			return err
		})
		if err != nil {
			return 0, nil, 0, err
		}
		return n, nil, ver, nil
	}
	desc, err := buf.Desc().MarshalBinary()
	if err != nil {
		return 0, nil, 0, err
	}
	req := &kvpb.GetRequest{Key: []byte(key), Buffer: desc}
	err = c.retry(ctx, func(s *session) error {
		req.InlineMax = min(s.inlineMax, uint64(buf.Len()))
		req.ServerId = []byte(s.id)
		resp, err := c.rpc.Get(ctx, req, grpc.WaitForReady(true))
		if err != nil {
			if ctx.Err() != nil && late != nil {
				// The cancellation reaches the server's write soon, but
				// no answer says when: wait generously.
				time.AfterFunc(lateGRPC, late)
				return fmt.Errorf("%w: %w", ctx.Err(), errLate)
			}
			return err
		}
		n, ver = int(resp.Length), resp.Version
		if resp.Inline {
			if len(resp.Value) != n || n > buf.Len() {
				return fmt.Errorf("kv: server sent an inline value of %d bytes for a length of %d", len(resp.Value), n)
			}
			inline = resp.Value
		}
		return nil
	})
	if err != nil {
		return 0, nil, 0, err
	}
	if inline != nil && !wantInline {
		copy(buf.Bytes(), inline)
		inline = nil
	}
	return n, inline, ver, nil
}

// Put stores value under key, overwriting any value it had. A value larger
// than the inline limit is copied into a buffer of the client's pool for the
// server to read; PutBuffer avoids the copy.
func (c *Client) Put(ctx context.Context, key string, value []byte) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putValue(ctx, key, value)
	return c.bounded(ctx, "put", err)
}

// putValue is Put, returning the stored value's version.
func (c *Client) putValue(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	sess, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	if uint64(len(value)) <= sess.inlineMax {
		return c.putInline(ctx, key, value)
	}
	if sess.maxValue > 0 && uint64(len(value)) > sess.maxValue {
		return 0, fmt.Errorf("kv: value of %d bytes is larger than the server's limit of %d: %w", len(value), sess.maxValue, ErrInvalid)
	}
	buf, err := c.e.AllocWait(ctx, len(value))
	if err != nil {
		return 0, fmt.Errorf("kv: put buffer of %d bytes: %w", len(value), err)
	}
	defer c.e.Free(buf)
	copy(buf.Bytes(), value)
	return c.putBuffer(ctx, key, buf, len(value))
}

// PutBuffer stores the first n bytes of buf, a buffer of the client's
// engine, under key: the server reads them straight from buf. buf must not
// change until PutBuffer returns.
func (c *Client) PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cPut, time.Now(), &err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	_, err = c.putBuffer(ctx, key, buf, n)
	return c.bounded(ctx, "put", err)
}

func (c *Client) putBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) (uint64, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	if n < 0 || n > buf.Len() {
		return 0, fmt.Errorf("kv: put of %d bytes from a buffer of %d: %w", n, buf.Len(), ErrInvalid)
	}
	sess, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	if uint64(n) <= sess.inlineMax { // faster inline: see DefaultInlineMax
		return c.putInline(ctx, key, buf.Bytes()[:n])
	}
	d, err := buf.Desc().Slice(0, uint64(n))
	if err != nil {
		return 0, err
	}
	desc, err := d.MarshalBinary()
	if err != nil {
		return 0, err
	}
	return c.put(ctx, &kvpb.PutRequest{Key: []byte(key), Source: &kvpb.PutRequest_Buffer{Buffer: desc}})
}

// putInline is put of an inline value on the data-plane request path:
// without a PutRequest, the request is encoded straight into the message
// (the value's one copy), and the call, with room for its response, comes
// from a pool.
func (c *Client) putInline(ctx context.Context, key string, value []byte) (uint64, error) {
	if c.msgs == nil {
		return c.put(ctx, &kvpb.PutRequest{Key: []byte(key), Source: &kvpb.PutRequest_Value{Value: value}})
	}
	var ver uint64
	err := c.retry(ctx, func(s *session) error {
		pc := callPool.Get().(*pendingCall)
		pc.size = requestSize(len(key), len(value), len(s.id))
		pc.key, pc.reqBytes = unsafe.Slice(unsafe.StringData(key), len(key)), value
		pc.sid = unsafe.Slice(unsafe.StringData(s.id), len(s.id))
		r, done, err := c.callWith(ctx, s, pc, pc.encPut, nil)
		if err == nil {
			ver = r.GetPut().GetVersion()
		}
		if done {
			pc.clearRequest()
			pc.dst, pc.late, pc.size = nil, nil, 0
			callPool.Put(pc)
		}
		return err
	})
	return ver, err
}

func (c *Client) put(ctx context.Context, req *kvpb.PutRequest) (uint64, error) {
	var ver uint64
	err := c.retry(ctx, func(s *session) error {
		req.ServerId = []byte(s.id)
		if c.msgs != nil {
			r, err := c.call(ctx, s, &kvpb.Request{Op: &kvpb.Request_Put{Put: req}}, nil, nil)
			if err == nil {
				ver = r.GetPut().GetVersion()
			}
			return err
		}
		resp, err := c.rpc.Put(ctx, req, grpc.WaitForReady(true))
		if err == nil {
			ver = resp.Version
		}
		return err
	})
	return ver, err
}

// Delete removes key; a missing key gets an error matching ErrNotFound.
func (c *Client) Delete(ctx context.Context, key string) (err error) {
	if c.metrics != nil {
		defer c.metrics.done(cDelete, time.Now(), &err)
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	req := &kvpb.DeleteRequest{Key: []byte(key)}
	err = c.retry(ctx, func(s *session) error {
		if c.msgs != nil {
			_, err := c.call(ctx, s, &kvpb.Request{Op: &kvpb.Request_Delete{Delete: req}}, nil, nil)
			return err
		}
		_, err := c.rpc.Delete(ctx, req, grpc.WaitForReady(true))
		return err
	})
	return c.bounded(ctx, "delete", err)
}

// Stats returns the server's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	var st Stats
	err := c.retry(ctx, func(*session) error {
		resp, err := c.rpc.Stats(ctx, &kvpb.StatsRequest{}, grpc.WaitForReady(true))
		if err == nil {
			st = statsFromProto(resp)
		}
		return err
	})
	return st, c.bounded(ctx, "stats", err)
}

// errLate marks a call abandoned while the server might still use the
// caller's buffer; whoever frees the buffer was handed over to run later.
var errLate = errors.New("the buffer is released once the server has answered")

// lateGRPC is how long a buffer of an abandoned gRPC GET stays allocated.
const lateGRPC = 5 * time.Second

// clientMsgBufs is the number of data-plane requests a client can have in
// flight at once.
const clientMsgBufs = 64

// onResponse handles a response on sess's data-plane connection; it runs on
// the transport's receive path (Peer.Handle). An inline GET value is copied
// into the caller's buffer here, while msg is valid.
func (c *Client) onResponse(sess *session, msg []byte) {
	var resp *kvpb.Response
	var value []byte // an inline GET value
	fast, ok := parseGetResponse(msg)
	var fastPut fastPutResponse
	isPut := false
	switch {
	case ok:
		value = fast.value
	default:
		if fastPut, isPut = parsePutResponse(msg); isPut {
			fast.id = fastPut.id
			break
		}
		resp = new(kvpb.Response)
		if err := proto.Unmarshal(msg, resp); err != nil {
			return // not a response to anything: ignore it
		}
		if g := resp.GetGet(); g != nil {
			value, g.Value = g.Value, nil
		}
		fast.id = resp.Id
	}
	sess.pmu.Lock()
	pc := sess.pending[fast.id]
	delete(sess.pending, fast.id)
	sess.pmu.Unlock()
	if pc == nil {
		return
	}
	switch {
	case ok:
		pc.get.Reset()
		pc.get.Length, pc.get.Version, pc.get.Inline = fast.length, fast.version, fast.inline
		pc.wrap.Get = &pc.get
		resp = pc.fastResponse(fast.id)
		resp.Result = &pc.wrap
	case isPut:
		pc.put.Reset()
		pc.put.Version, pc.put.Evicted = fastPut.version, fastPut.evicted
		pc.wrapPut.Put = &pc.put
		resp = pc.fastResponse(fastPut.id)
		resp.Result = &pc.wrapPut
	}
	if g := resp.GetGet(); g != nil && g.Inline && pc.late == nil {
		if len(value) != int(g.Length) || len(value) > len(pc.dst) {
			resp = &kvpb.Response{Id: resp.Id, Code: uint32(codes.Internal),
				Message: fmt.Sprintf("server sent an inline value of %d bytes for a length of %d and a buffer of %d", len(value), g.Length, len(pc.dst))}
		} else {
			copy(pc.dst, value)
		}
	}
	pc.deliver(resp)
}

// onNotify handles the notification that answers a GET whose value the
// server wrote into the caller's buffer (GetRequest.notify); it runs on the
// transport's receive path, after the value is in place. The notification
// carries the low 32 bits of the call's id: the calls in flight are the
// last few ids.
func (c *Client) onNotify(sess *session, n xfer.Notification) {
	sess.pmu.Lock()
	id := sess.nextID - uint64(uint32(sess.nextID)-n.Value)
	pc := sess.pending[id]
	if pc == nil || !pc.notify {
		sess.pmu.Unlock()
		return // not an answer to anything: ignore it
	}
	delete(sess.pending, id)
	sess.pmu.Unlock()
	resp := pc.fastResponse(id)
	if n.Len > uint64(len(pc.dst)) {
		resp.Code = uint32(codes.Internal)
		resp.Message = fmt.Sprintf("server notified a value of %d bytes for a buffer of %d", n.Len, len(pc.dst))
	} else {
		pc.get.Reset()
		pc.get.Length = n.Len
		pc.wrap.Get = &pc.get
		resp.Result = &pc.wrap
	}
	pc.deliver(resp)
}

func (pc *pendingCall) appendRequest(b []byte) []byte { return pc.enc(b, pc.id) }

// fastResponse returns the call's own Response, reset, for a response of
// the fast path.
func (pc *pendingCall) fastResponse(id uint64) *kvpb.Response {
	pc.resp.Reset()
	pc.resp.Id = id
	return &pc.resp
}

func (pc *pendingCall) deliver(r *kvpb.Response) {
	if pc.late != nil {
		pc.late()
		return
	}
	pc.ch <- r
}

// call sends req on the data plane and waits for its response, which it
// returns as the gRPC handler's result would be: a status error when the
// server refused. If ctx ends first and late is not nil, call returns an
// error matching errLate and runs late once the server is done with the
// request (its response came, or the connection failed).
//
// dst, when not nil, receives the value of an inline GET response.
func (c *Client) call(ctx context.Context, sess *session, req *kvpb.Request, dst []byte, late func()) (*kvpb.Response, error) {
	return c.callEnc(ctx, sess, func(b []byte, id uint64) []byte {
		req.Id = id
		out, err := proto.MarshalOptions{}.MarshalAppend(b, req)
		if err != nil {
			return nil
		}
		return out
	}, dst, late)
}

// callEnc is call with a request that enc appends to a message buffer,
// given the request's id.
func (c *Client) callEnc(ctx context.Context, sess *session, enc func(b []byte, id uint64) []byte, dst []byte, late func()) (*kvpb.Response, error) {
	r, _, err := c.callWith(ctx, sess, &pendingCall{ch: make(chan *kvpb.Response, 1), dst: dst}, enc, late)
	return r, err
}

// callWith is callEnc with the call pc. It reports done when nothing
// refers to pc any more (its response came and was taken from pc.ch, or it
// never went out): a pooled pc may then be reused once its caller is done
// with the response.
func (c *Client) callWith(ctx context.Context, sess *session, pc *pendingCall, enc func(b []byte, id uint64) []byte, late func()) (_ *kvpb.Response, done bool, _ error) {
	sess.pmu.Lock()
	if sess.down != nil {
		sess.pmu.Unlock()
		return nil, true, status.Errorf(codes.Unavailable, "data-plane connection: %v", sess.down)
	}
	sess.nextID++
	id := sess.nextID
	sess.pending[id] = pc
	sess.pmu.Unlock()
	sent, err := false, error(nil)
	if pc.size > 0 {
		// Encoded straight into the transport's send queue, if it takes
		// the request there (tcp, shm).
		pc.enc, pc.id = enc, id
		if pc.fill == nil {
			pc.fill = pc.appendRequest
		}
		sent, err = sess.peer.TrySendAppend(pc.size, pc.fill)
		pc.enc = nil
	}
	if !sent && err == nil {
		err = c.sendBuffered(ctx, sess, enc, id)
	}
	down := sess.peer.Down()
	if err != nil {
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		delete(sess.pending, id)
		sess.pmu.Unlock()
		// Unless it was still waiting, a response may be in pc.ch.
		if ctx.Err() != nil {
			return nil, waiting, ctx.Err()
		}
		return nil, waiting, status.Errorf(codes.Unavailable, "data-plane request: %v", err)
	}
	select {
	case r := <-pc.ch:
		if r == nil {
			return nil, true, status.Error(codes.Unavailable, "data-plane connection lost")
		}
		r, err := result(r)
		return r, true, err
	case <-down:
		// The connection failed with the request unanswered. The server
		// is done with the caller's buffer: its connection is gone too.
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		if waiting {
			pc.late = func() {}
		}
		sess.pmu.Unlock()
		if !waiting {
			if r := <-pc.ch; r != nil {
				r, err := result(r)
				return r, true, err
			}
		}
		return nil, !waiting, status.Error(codes.Unavailable, "data-plane connection lost")
	case <-ctx.Done():
		sess.pmu.Lock()
		_, waiting := sess.pending[id]
		if waiting {
			pc.late = func() {}
			if late != nil {
				pc.late = late // runs when the response arrives
			}
		}
		sess.pmu.Unlock()
		if !waiting {
			<-pc.ch // being delivered right now: the server is done
			return nil, true, ctx.Err()
		}
		if late != nil {
			return nil, false, fmt.Errorf("%w: %w", ctx.Err(), errLate)
		}
		return nil, false, ctx.Err()
	}
}

// sendBuffered sends the request enc encodes from one of the client's
// message buffers.
func (c *Client) sendBuffered(ctx context.Context, sess *session, enc func(b []byte, id uint64) []byte, id uint64) error {
	b, err := c.msgs.get(ctx)
	if err != nil {
		return err
	}
	defer c.msgs.put(b)
	out := enc(b[:0], id)
	if out == nil || cap(out) != cap(b) {
		return fmt.Errorf("kv: request of %d bytes does not fit a message of %d", len(out), cap(b))
	}
	return sess.peer.Send(ctx, out)
}

// result returns r, or the status error it carries.
func result(r *kvpb.Response) (*kvpb.Response, error) {
	if r.Code == 0 {
		return r, nil
	}
	st := status.New(codes.Code(r.Code), r.Message)
	if r.TooSmall != nil {
		if d, err := st.WithDetails(r.TooSmall); err == nil {
			st = d
		}
	}
	return nil, st.Err()
}

package kv

import (
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

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

	// msgs, when set, are request buffers the client shares with others
	// (a Cluster's clients share one set) and does not close.
	msgs *msgBufs
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

	msgs *msgBufs // request messages (RequestsData)
	// msgShare bounds how many of shared msgs (ClientOptions.msgs) this
	// client holds at once, so that a server that does not answer cannot
	// take them all; nil when msgs are the client's own.
	msgShare chan struct{}
	log      *slog.Logger
	poolCap  uint64 // capacity of the engine's buffer pool

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
	if c.msgs != nil && c.msgShare == nil {
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

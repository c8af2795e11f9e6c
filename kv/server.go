package kv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv/kvpb"
	"github.com/xferio/xfer/probe"
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

// NewServer opens the data-plane engine and its value pool.
func NewServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	full, err := ParseFullPolicy(string(opts.Full))
	if err != nil {
		return nil, err
	}
	opts.Full = full
	if opts.MaxKey == 0 {
		opts.MaxKey = DefaultMaxKey
	}
	if opts.MaxKey < 0 || opts.MaxValue < 0 {
		return nil, errors.New("kv: MaxKey and MaxValue must not be negative")
	}
	inlineAuto := opts.InlineMax == 0
	if inlineAuto {
		opts.InlineMax = DefaultInlineMax
	}
	if opts.Engine.Listen == "" {
		opts.Engine.Listen = ":0"
	}
	if opts.Engine.TCP.PollSpin == 0 {
		opts.Engine.TCP.PollSpin = DefaultPollSpin
	}
	// Data-plane requests carry a key and, inline, a small value.
	if need := msgSize(opts.MaxKey, opts.InlineMax); opts.Engine.MaxMessage < need {
		opts.Engine.MaxMessage = need
	}
	if opts.Devices == 0 {
		opts.Devices = 1
	}
	if opts.Engine.Metrics == nil {
		opts.Engine.Metrics = opts.Metrics
	}
	es, err := openEngines(ctx, opts)
	if err != nil {
		return nil, err
	}
	e := es[0]
	capacity := int(e.Pool().Stats().Capacity)
	if opts.MaxValue == 0 || opts.MaxValue > capacity {
		opts.MaxValue = capacity
	}
	s := &Server{inlineAuto: inlineAuto, opts: opts, e: e, es: es, st: newStore(e.Pool(), opts.Full), log: opts.Logger, peerWait: defaultPeerWait}
	s.auth = newCallAuth(e)
	s.peers.m = make(map[xfer.ID]*xfer.Peer)
	s.peers.changed = make(chan struct{})
	rand.Read(s.id[:])
	s.ctx, s.stop = context.WithCancel(context.Background())
	for _, e := range es {
		m, err := newMsgBufs(e, serverMsgBufs, opts.Engine.MaxMessage)
		if err != nil {
			for _, m := range s.msgs {
				m.close()
			}
			for i := len(es) - 1; i >= 0; i-- {
				es[i].Close()
			}
			return nil, err
		}
		s.msgs = append(s.msgs, m)
	}
	if opts.Metrics != nil {
		s.metrics = newServerMetrics(s)
		if err := opts.Metrics.Register(s.metrics); err != nil {
			for _, m := range s.msgs {
				m.close()
			}
			for i := len(es) - 1; i >= 0; i-- {
				es[i].Close()
			}
			return nil, fmt.Errorf("kv: metrics: %w", err)
		}
	}
	for i, e := range es {
		s.wg.Go(func() { s.acceptLoop(e, s.msgs[i]) })
	}
	return s, nil
}

// railsOptions maps Devices N > 1, where rdma may carry the data plane,
// onto one engine over N rails (rdma.devices): the first N of the host's
// RDMA devices (have, or why they could not be listed), unless RDMA.Device
// or RDMA.Devices already names them. That engine cuts large transfers
// over the devices and moves a failed one's operations to the others
// (docs/RDMA.md), which N engines, one per device, did not.
func railsOptions(opts ServerOptions, have []string, listErr error) (ServerOptions, error) {
	if opts.Engine.RDMA.Device != "" || len(opts.Engine.RDMA.Devices) > 0 {
		opts.Devices = 1
		return opts, nil
	}
	if listErr != nil || len(have) < opts.Devices {
		return opts, fmt.Errorf("kv: devices %d: this host has %d RDMA devices %v (%v); use --transport tcp or shm for several plain listeners", opts.Devices, len(have), have, listErr)
	}
	opts.Engine.RDMA.Devices = append([]string(nil), have[:opts.Devices]...)
	opts.Devices = 1
	return opts, nil
}

// openEngines opens the data-plane engines. The first owns the value pool;
// the others register the same memory, so any of them can move any value.
func openEngines(ctx context.Context, opts ServerOptions) ([]*xfer.Engine, error) {
	if opts.Devices < 1 {
		return nil, fmt.Errorf("kv: devices %d: must be at least 1", opts.Devices)
	}
	if opts.Devices > 1 && opts.Engine.Transport != xfer.PolicyTCP && opts.Engine.Transport != xfer.PolicySHM {
		var have []string
		devs, err := probe.Devices()
		for _, d := range devs {
			have = append(have, d.Name)
		}
		if opts, err = railsOptions(opts, have, err); err != nil {
			return nil, err
		}
	}
	var es []*xfer.Engine
	fail := func(err error) ([]*xfer.Engine, error) {
		for _, e := range es {
			e.Close()
		}
		return nil, fmt.Errorf("kv: data plane: %w", err)
	}
	for i := range opts.Devices {
		cfg := opts.Engine
		if cfg.Metrics != nil && opts.Devices > 1 {
			cfg.Metrics = prometheus.WrapRegistererWith(prometheus.Labels{"engine": strconv.Itoa(i)}, cfg.Metrics)
		}
		if i > 0 {
			cfg.MemoryMB = 1 // their own pools stay unused
			// The first engine is the node in the directory; the others are
			// found through its Hello.
			cfg.Directory, cfg.NodeID = "", ""
			if host, _, err := net.SplitHostPort(cfg.Listen); err == nil {
				cfg.Listen = net.JoinHostPort(host, "0")
			}
		}
		e, err := xfer.Open(ctx, cfg)
		if err != nil {
			return fail(err)
		}
		es = append(es, e)
		if i > 0 {
			if _, err := e.Register(es[0].DefaultRegion().Bytes(), xfer.AccessReadWrite); err != nil {
				return fail(err)
			}
		}
	}
	return es, nil
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

// Serve serves the KV service on lis until ctx is done, then stops
// gracefully (requests in progress finish, for up to five seconds) and
// closes the server.
//
// When the server's engine has a node ID in a directory (ServerOptions.Engine's
// Directory and NodeID), Serve lists lis's address in the node's entry as
// the "kv" service (Advertise) first, so that a Cluster finds the server.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	if err := s.Advertise(ctx, lis.Addr().String()); err != nil {
		s.Close()
		return err
	}
	opts = append([]grpc.ServerOption{grpc.Creds(s.Credentials()), grpc.InTapHandle(s.auth.tap)}, opts...)
	g := grpc.NewServer(append(s.grpcLimits(), opts...)...)
	s.Register(g)
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			g.Stop()
		}
		<-errc
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// grpcLimits are the gRPC server options by which Serve closes the
// connections of idle and vanished clients; options passed to Serve come
// after them, and win.
func (s *Server) grpcLimits() []grpc.ServerOption {
	idle := s.opts.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle, Time: keepaliveTime, Timeout: keepaliveTimeout}),
		// Clients may ping (gRPC's keepalive) as often as every 10 s, even
		// without an RPC in flight, without being sent away for it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(min(idle, handshakeTimeout)),
	}
}

// Advertise lists addr, where the server's gRPC service is reachable, in
// its engine's directory entry as the "kv" service (ServiceName); a
// wildcard host becomes the engine's advertised host. Serve calls it; a
// program that registers the service with a grpc.Server of its own calls
// it itself. Without a directory and node ID it does nothing.
func (s *Server) Advertise(ctx context.Context, addr string) error {
	if s.e.NodeID() == "" {
		return nil
	}
	if err := s.e.SetService(ctx, ServiceName, addr); err != nil {
		return fmt.Errorf("kv: advertise %s: %w", addr, err)
	}
	// In a cluster now: answer only the keys it owns, while it knows it
	// does (fence.go).
	s.fenceOnce.Do(func() {
		f := newFence(s, s.e.Directory(), s.e.NodeID(), s.e.Config().DirectoryTTL)
		s.fence.Store(f)
		s.wg.Go(func() { f.run(s.ctx) })
	})
	return nil
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
		for i := len(s.es) - 1; i >= 0; i-- { // the first owns the memory
			if cerr := s.es[i].Close(); err == nil {
				err = cerr
			}
		}
		for _, m := range s.msgs {
			m.close()
		}
		s.st.clear()
	})
	return err
}

// peerSet tracks the data-plane connections of clients, by engine ID.
type peerSet struct {
	mu      sync.Mutex
	m       map[xfer.ID]*xfer.Peer
	changed chan struct{} // closed and replaced on every change
}

func (ps *peerSet) set(p *xfer.Peer) {
	ps.mu.Lock()
	old := ps.m[p.ID()]
	ps.m[p.ID()] = p
	close(ps.changed)
	ps.changed = make(chan struct{})
	ps.mu.Unlock()
	if old != nil && old != p {
		old.Close() // the client reconnected; its old connection is dead
	}
}

func (ps *peerSet) drop(p *xfer.Peer) {
	ps.mu.Lock()
	if ps.m[p.ID()] == p {
		delete(ps.m, p.ID())
	}
	ps.mu.Unlock()
}

// get returns the client's connection, waiting up to peerWait for it.
func (ps *peerSet) get(ctx context.Context, id xfer.ID, wait time.Duration) (*xfer.Peer, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		ps.mu.Lock()
		p, changed := ps.m[id], ps.changed
		ps.mu.Unlock()
		if p != nil {
			return p, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-timer.C:
			return nil, status.Errorf(codes.Unavailable, "client engine %s is not connected to the data plane: call Hello and dial one of its data addresses", id)
		}
	}
}

// acceptLoop accepts clients' data-plane connections and watches each until
// it goes away.
func (s *Server) acceptLoop(e *xfer.Engine, msgs *msgBufs) {
	for {
		p, err := e.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, xfer.ErrClosed) {
				return
			}
			s.log.Warn("kv: data-plane handshake failed", "err", err)
			continue
		}
		s.log.Debug("kv: client connected", "peer", p, "transport", p.Transport())
		s.peers.set(p)
		s.wg.Go(func() { s.serveMessages(p, msgs) })
	}
}

// serveMessages serves the requests p, a client's connection, sends on the
// data plane (see kvpb.Request) until it goes down, then forgets it. The
// requests arrive on the transport's receive path (Peer.Handle): a GET the
// server answers inline is answered right there, anything that may wait (a
// one-sided transfer, a full pool) gets a goroutine.
func (s *Server) serveMessages(p *xfer.Peer, msgs *msgBufs) {
	var wg sync.WaitGroup
	ans := newAnswer()
	p.Handle(func(msg []byte) {
		if g, ok := parseGetRequest(msg); ok && s.serveSmallGet(p, msgs, ans, g.id, g.key, g.inlineMax, g.serverID) {
			return
		}
		if r, ok := parsePutRequest(msg); ok {
			s.serveInlinePut(p, msgs, ans, r)
			return
		}
		req := new(kvpb.Request)
		if err := proto.Unmarshal(msg, req); err != nil {
			// The id is unknown: the client's call waits for its deadline.
			s.log.Warn("kv: malformed data-plane request", "peer", p, "bytes", len(msg), "err", err)
			return
		}
		if !mayWait(req) {
			// Answered from memory: no goroutine.
			resp := s.serveRequest(p, req) // not nil: not a GET
			if b, ok := msgs.tryGet(); ok {
				if out, ok := s.marshal(b, resp); ok {
					s.sendNow(p, msgs, b, out)
				} else {
					msgs.put(b)
				}
				return
			}
			wg.Go(func() { s.send(p, msgs, resp) })
			return
		}
		wg.Go(func() { s.send(p, msgs, s.serveRequest(p, req)) })
	})
	select {
	case <-p.Down():
	case <-s.ctx.Done():
	}
	s.peers.drop(p)
	p.Close()
	wg.Wait()
	s.log.Debug("kv: client gone", "peer", p)
}

// mayWait reports whether serving req may wait: a one-sided transfer (a
// GET into a buffer, a PUT from one). DELETEs, inline PUTs and malformed
// requests are answered from memory at once.
func mayWait(req *kvpb.Request) bool {
	switch op := req.Op.(type) {
	case *kvpb.Request_Get:
		return true
	case *kvpb.Request_Put:
		_, inline := op.Put.Source.(*kvpb.PutRequest_Value)
		return !inline
	}
	return false
}

// answer encodes the response of an inline GET or PUT straight into the
// transport's send queue (Peer.TrySendAppend): one copy of the value, from
// its slot into the queue, and no message buffer. A connection has one,
// reused for each request: its handler runs one message at a time.
type answer struct {
	id, version uint64
	value       []byte // a GET's value
	evicted     uint32 // a PUT's evictions
	get         bool
	fill        func(b []byte) []byte // a.append, bound once
}

func newAnswer() *answer {
	a := new(answer)
	a.fill = a.append
	return a
}

func (a *answer) append(b []byte) []byte {
	if a.get {
		return appendGetResponse(b, a.id, uint64(len(a.value)), a.version, true, a.value)
	}
	return appendPutResponse(b, a.id, a.version, a.evicted)
}

// answerOverhead bounds what a Response adds to an inline GET's value: the
// id, the GetResponse's header, length, version, inline flag and the
// value's header, each at most a tag and a 10-byte varint.
const answerOverhead = 6 * (1 + 10)

// send sends the answer through the send queue, if the transport takes it
// there at once; false leaves it to a message buffer.
func (a *answer) send(s *Server, p *xfer.Peer) bool {
	ok, err := p.TrySendAppend(len(a.value)+answerOverhead, a.fill)
	a.value = nil
	if err != nil {
		// The connection failed (its client's calls fail with it), or the
		// bound is wrong: the buffered path then sends, or fails alike.
		s.log.Debug("kv: send response", "peer", p, "err", err)
	}
	return ok
}

// serveSmallGet answers g at once when the answer needs no data-plane
// transfer: the value inline, straight from its slot into the response. It
// reports whether it answered.
func (s *Server) serveSmallGet(p *xfer.Peer, msgs *msgBufs, ans *answer, id uint64, key []byte, inlineMax uint64, serverID []byte) bool {
	if s.checkSession(serverID) != nil || s.checkKey(key) != nil || !s.fence.Load().mayRead(key) {
		return false // the full path words the error
	}
	sl := s.st.acquire(key)
	if sl == nil {
		return false
	}
	defer s.st.release(sl)
	n := uint64(sl.n)
	if n > inlineMax || int(n) > s.inlineMax(p.Transport()) {
		return false
	}
	s.gets.Add(1)
	s.hits.Add(1)
	s.inlineBytes.Add(n)
	s.inlineReqs.Add(1)
	ans.id, ans.version, ans.value, ans.get = id, sl.ver, sl.value(), true
	if ans.send(s, p) {
		return true
	}
	b, ok := msgs.tryGet()
	if !ok {
		// Every buffer is busy: answer from a goroutine that can wait.
		r := &kvpb.Response{Id: id, Result: &kvpb.Response_Get{Get: &kvpb.GetResponse{Length: n, Version: sl.ver, Inline: true, Value: bytes.Clone(sl.value())}}}
		s.wg.Go(func() { s.send(p, msgs, r) })
		return true
	}
	// Straight from the slot into the message, before the slot is released.
	out := appendGetResponse(b[:0], id, n, sl.ver, true, sl.value())
	if cap(out) != cap(b) {
		msgs.put(b)
		return false // cannot happen: messages are sized for inline values
	}
	s.sendNow(p, msgs, b, out)
	return true
}

// serveInlinePut answers a PUT whose value came inline, at once: the
// handler copies the value from the message, where it lies, into its slot,
// and the response is encoded by hand, into the send queue when the
// transport takes it there. Unlike proto.Unmarshal, nothing copies the
// value or allocates the request on the way. When every message buffer is
// busy (and the queue refused), a goroutine sends the response.
func (s *Server) serveInlinePut(p *xfer.Peer, msgs *msgBufs, ans *answer, r fastPut) {
	src := kvpb.PutRequest_Value{Value: r.value}
	req := kvpb.PutRequest{Key: r.key, Source: &src, ServerId: r.serverID}
	ver, evicted, err := s.putValue(s.ctx, &req) // an inline PUT needs no peer (fromPeer)
	if err == nil {
		ans.id, ans.version, ans.evicted, ans.get = r.id, ver, evicted, false
		if ans.send(s, p) {
			return
		}
	}
	b, ok := msgs.tryGet()
	if !ok {
		er := &kvpb.Response{Id: r.id}
		if err == nil {
			er.Result = &kvpb.Response_Put{Put: &kvpb.PutResponse{Version: ver, Evicted: evicted}}
		} else {
			setError(er, err)
		}
		s.wg.Go(func() { s.send(p, msgs, er) })
		return
	}
	var out []byte
	if err == nil {
		out = appendPutResponse(b[:0], r.id, ver, evicted)
		ok = cap(out) == cap(b)
	} else {
		er := &kvpb.Response{Id: r.id}
		setError(er, err)
		out, ok = s.marshal(b, er)
	}
	if !ok {
		msgs.put(b) // cannot happen: messages are sized for inline values
		return
	}
	s.sendNow(p, msgs, b, out)
}

// serveRequest runs one data-plane request through the gRPC handlers and
// returns the response: nil for a GET its notification answered.
func (s *Server) serveRequest(p *xfer.Peer, req *kvpb.Request) *kvpb.Response {
	ctx := context.WithValue(s.ctx, fromPeer{}, p)
	resp := &kvpb.Response{Id: req.Id}
	var err error
	switch op := req.Op.(type) {
	case *kvpb.Request_Get:
		var r *kvpb.GetResponse
		var notified bool
		if r, notified, err = s.get(ctx, op.Get, req.Id, op.Get.Notify); notified {
			return nil // the notification answered (only GETs, which send)
		} else if err == nil {
			resp.Result = &kvpb.Response_Get{Get: r}
		}
	case *kvpb.Request_Put:
		var r *kvpb.PutResponse
		if r, err = s.put(ctx, op.Put); err == nil {
			resp.Result = &kvpb.Response_Put{Put: r}
		}
	case *kvpb.Request_Delete:
		var r *kvpb.DeleteResponse
		if r, err = s.delete(op.Delete); err == nil {
			resp.Result = &kvpb.Response_Delete{Delete: r}
		}
	default:
		err = status.Error(codes.InvalidArgument, "request without an operation")
	}
	if err != nil {
		setError(resp, err)
	}
	return resp
}

// setError makes resp carry err, a handler's status error.
func setError(resp *kvpb.Response, err error) {
	st := status.Convert(err)
	resp.Code, resp.Message = uint32(st.Code()), st.Message()
	for _, d := range st.Details() {
		if b, ok := d.(*kvpb.BufferTooSmall); ok {
			resp.TooSmall = b
		}
	}
}

// send sends resp to p, waiting for a message buffer if need be; nil is a
// request answered otherwise (a GET's notification).
func (s *Server) send(p *xfer.Peer, msgs *msgBufs, resp *kvpb.Response) {
	if resp == nil {
		return
	}
	b, err := msgs.get(s.ctx)
	if err != nil {
		return // shutting down
	}
	if out, ok := s.marshal(b, resp); ok {
		if err := p.Send(s.ctx, out); err != nil {
			s.log.Debug("kv: send response", "peer", p, "err", err)
		}
	}
	msgs.put(b)
}

// sendNow sends out, encoded in message buffer b, to p without waiting, for
// the receive path: a send that cannot complete at once (no credit, a full
// socket) finishes in a goroutine of its own, which keeps b until then.
func (s *Server) sendNow(p *xfer.Peer, msgs *msgBufs, b, out []byte) {
	batch := p.Submit([]xfer.Op{{Kind: xfer.OpSend, Local: out}})
	if batch.Done() {
		msgs.put(b)
		return
	}
	s.wg.Go(func() {
		batch.Wait(context.Background()) // a send always completes, or fails with its connection
		msgs.put(b)
	})
}

// marshal encodes resp at the start of b; false (logged) if it does not fit.
func (s *Server) marshal(b []byte, resp *kvpb.Response) ([]byte, bool) {
	out, err := proto.MarshalOptions{}.MarshalAppend(b[:0], resp)
	if err != nil || cap(out) != cap(b) {
		s.log.Error("kv: response does not fit a message", "bytes", len(out), "limit", cap(b), "err", err)
		return nil, false
	}
	return out, true
}

// msgSize is the message size the data-plane request path needs: a key, an
// inline value and the rest of the request, rounded up to 4 KiB.
func msgSize(maxKey, inlineMax int) int {
	return (max(inlineMax, 0) + maxKey + 1024 + 4095) &^ 4095
}

// serverMsgBufs is the number of responses each engine can send at once.
const serverMsgBufs = 64

// checkSession refuses requests that follow a Hello of an earlier server.
func (s *Server) checkSession(id []byte) error {
	if len(id) > 0 && !bytes.Equal(id, s.id[:]) {
		return status.Error(codes.Unavailable, "the server restarted: say Hello again")
	}
	return nil
}

func (s *Server) checkKey(key []byte) error {
	if len(key) == 0 {
		return status.Error(codes.InvalidArgument, "empty key")
	}
	if len(key) > s.opts.MaxKey {
		return status.Errorf(codes.InvalidArgument, "key of %d bytes is longer than the limit of %d", len(key), s.opts.MaxKey)
	}
	return nil
}

// transportOf names the transport of the connection to the owner of d, the
// buffer of a request ("" when unknown).
func (s *Server) transportOf(ctx context.Context, d xfer.RegionDesc) string {
	if p, ok := ctx.Value(fromPeer{}).(*xfer.Peer); ok {
		return p.Transport()
	}
	s.peers.mu.Lock()
	p := s.peers.m[d.Owner]
	s.peers.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.Transport()
}

// fromPeer is the context key of the data-plane connection a request came
// on (none for gRPC calls).
type fromPeer struct{}

// owner returns the connection to the engine that owns buffer d. A request
// that came on the data plane may only name its own sender's buffers.
func (s *Server) owner(ctx context.Context, d xfer.RegionDesc) (*xfer.Peer, error) {
	if p, ok := ctx.Value(fromPeer{}).(*xfer.Peer); ok {
		if p.ID() != d.Owner {
			return nil, status.Errorf(codes.InvalidArgument, "buffer %s belongs to engine %s, not to the sender %s", d, d.Owner, p.ID())
		}
		return p, nil
	}
	return s.peers.get(ctx, d.Owner, s.peerWait)
}

// decodeBuffer decodes the client's buffer descriptor.
func decodeBuffer(b []byte) (xfer.RegionDesc, error) {
	var d xfer.RegionDesc
	if err := d.UnmarshalBinary(b); err != nil {
		return d, status.Errorf(codes.InvalidArgument, "buffer descriptor: %v", err)
	}
	return d, nil
}

// planeErr turns a data-plane failure into a gRPC status.
func planeErr(ctx context.Context, what string, d xfer.RegionDesc, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, xfer.ErrRemoteAccess), errors.Is(err, xfer.ErrNotRegistered), errors.Is(err, xfer.ErrTooLarge):
		return status.Errorf(codes.InvalidArgument, "%s buffer %s: refused by the client's engine: %v", what, d, err)
	case errors.Is(err, xfer.ErrClosed), errors.Is(err, xfer.ErrPeerLost):
		return status.Errorf(codes.Unavailable, "%s buffer: the client's data-plane connection is gone: %v", what, err)
	}
	return status.Errorf(codes.Unavailable, "%s buffer %s: %v", what, d, err)
}

// inlineByTransport is Hello's inline_max_by_transport.
func (s *Server) inlineByTransport() map[string]uint64 {
	if !s.inlineAuto {
		return nil
	}
	m := map[string]uint64{}
	for _, name := range xfer.TransportNames() {
		if oneCopy(name) {
			m[name] = DefaultInlineMaxSHM
		}
	}
	return m
}

// oneCopy reports whether a one-sided transfer on the transport named is
// one copy or the NIC's DMA (shm, rdma), not a pass through both engines
// (tcp): its clients get DefaultInlineMaxSHM under the default InlineMax.
func oneCopy(transport string) bool {
	c, ok := xfer.TransportCaps(transport)
	return ok && !c.OwnerServes()
}

// inlineMax is the inline limit for a client on the given transport ("" if
// unknown).
func (s *Server) inlineMax(transport string) int {
	if s.inlineAuto && oneCopy(transport) {
		return min(DefaultInlineMaxSHM, s.opts.InlineMax)
	}
	return s.opts.InlineMax
}

// Hello implements kvpb.KVServer.
func (s *Server) Hello(ctx context.Context, req *kvpb.HelloRequest) (*kvpb.HelloResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	if req.GetProtocol() < Protocol {
		return nil, status.Errorf(codes.FailedPrecondition, "client speaks KV protocol %d, this server %d", req.GetProtocol(), Protocol)
	}
	return &kvpb.HelloResponse{
		Protocol:             Protocol,
		DataAddrs:            s.DataAddrs(),
		ServerId:             s.id[:],
		MaxKey:               uint64(s.opts.MaxKey),
		MaxValue:             uint64(s.opts.MaxValue),
		InlineMax:            uint64(max(s.opts.InlineMax, 0)),
		InlineMaxByTransport: s.inlineByTransport(),
		Capacity:             s.e.Pool().Stats().Capacity,
	}, nil
}

// Get implements kvpb.KVServer: it WRITEs the value into the client's buffer,
// or returns it inline when it is small enough for both sides.
func (s *Server) Get(ctx context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	r, _, err := s.get(ctx, req, 0, false) // notify is for the data plane only
	return r, err
}

// get serves a GET. With notify (a data-plane request with req.Notify), a
// value that goes into the client's buffer is written with WriteNotify,
// whose notification, carrying the low 32 bits of the request's id, is the
// answer: get then reports notified, and there is no response to send. On
// the data plane the buffer's owner is the sender (owner), whom the
// notification reaches.
func (s *Server) get(ctx context.Context, req *kvpb.GetRequest, id uint64, notify bool) (_ *kvpb.GetResponse, notified bool, _ error) {
	s.gets.Add(1)
	if err := s.checkSession(req.ServerId); err != nil {
		return nil, false, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return nil, false, err
	}
	var d xfer.RegionDesc
	if len(req.Buffer) > 0 {
		var err error
		if d, err = decodeBuffer(req.Buffer); err != nil {
			return nil, false, err
		}
	}
	var sl *slot
	if s.fence.Load().mayRead(req.Key) {
		sl = s.st.acquire(req.Key)
	}
	if sl == nil {
		s.misses.Add(1)
		return nil, false, status.Errorf(codes.NotFound, "not found: key %q", req.Key)
	}
	defer s.st.release(sl)
	s.hits.Add(1)
	n := uint64(sl.n)
	if n <= req.InlineMax && int(n) <= s.inlineMax(s.transportOf(ctx, d)) {
		s.inlineBytes.Add(n)
		s.inlineReqs.Add(1)
		return &kvpb.GetResponse{Length: n, Version: sl.ver, Inline: true, Value: append([]byte(nil), sl.value()...)}, false, nil
	}
	if d.Len < n {
		st := status.Newf(codes.FailedPrecondition, "value of key %q is %d bytes and the buffer holds %d: retry with a buffer of at least %d bytes", req.Key, n, d.Len, n)
		if dst, err := st.WithDetails(&kvpb.BufferTooSmall{Needed: n, Have: d.Len}); err == nil {
			st = dst
		}
		return nil, false, st.Err()
	}
	if n == 0 {
		return &kvpb.GetResponse{Version: sl.ver}, false, nil
	}
	p, err := s.owner(ctx, d)
	if err != nil {
		return nil, false, err
	}
	notified = notify
	if notified {
		err = p.WriteNotify(ctx, sl.value(), d.At(0), uint32(id))
	} else {
		err = p.Write(ctx, sl.value(), d.At(0))
	}
	if err != nil {
		return nil, false, planeErr(ctx, "get", d, err)
	}
	s.planeBytes.Add(n)
	s.planeReqs.Add(1)
	if notified {
		return nil, true, nil
	}
	return &kvpb.GetResponse{Length: n, Version: sl.ver}, false, nil
}

// Put implements kvpb.KVServer: it reserves a slot, READs the value from the
// client's buffer into it (or copies the inline value), and only then makes
// it the key's value. A PUT that fails on the way frees its slot.
func (s *Server) Put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return s.put(ctx, req)
}

// put serves a PUT, from gRPC or the data plane.
func (s *Server) put(ctx context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	ver, evicted, err := s.putValue(ctx, req)
	if err != nil {
		return nil, err
	}
	return &kvpb.PutResponse{Version: ver, Evicted: evicted}, nil
}

// putValue is put without a response to allocate: it returns the value's
// version and how many values the PUT evicted.
func (s *Server) putValue(ctx context.Context, req *kvpb.PutRequest) (ver uint64, nevicted uint32, _ error) {
	s.puts.Add(1)
	if err := s.checkSession(req.ServerId); err != nil {
		return 0, 0, err
	}
	if err := s.checkKey(req.Key); err != nil {
		return 0, 0, err
	}
	var (
		d      xfer.RegionDesc
		n      int
		inline bool
	)
	switch src := req.Source.(type) {
	case *kvpb.PutRequest_Value:
		if len(src.Value) > s.opts.InlineMax {
			return 0, 0, status.Errorf(codes.InvalidArgument, "inline value of %d bytes is larger than the inline limit of %d: send a buffer", len(src.Value), s.opts.InlineMax)
		}
		n, inline = len(src.Value), true
	case *kvpb.PutRequest_Buffer:
		var err error
		if d, err = decodeBuffer(src.Buffer); err != nil {
			return 0, 0, err
		}
		if d.Len > uint64(s.opts.MaxValue) {
			return 0, 0, s.tooLarge(d.Len)
		}
		n = int(d.Len)
	default:
		return 0, 0, status.Error(codes.InvalidArgument, "put needs a value: a buffer or an inline value")
	}
	if n > s.opts.MaxValue {
		return 0, 0, s.tooLarge(uint64(n))
	}
	f := s.fence.Load()
	gen, err := f.admit(req.Key)
	if err != nil {
		return 0, 0, err
	}
	b, evicted, err := s.st.reserve(ctx, n)
	if err != nil {
		if errors.Is(err, errFull) {
			return 0, 0, status.Errorf(codes.ResourceExhausted, "%v", err)
		}
		if ctx.Err() != nil {
			return 0, 0, status.FromContextError(ctx.Err()).Err()
		}
		return 0, 0, status.Errorf(codes.Internal, "reserve %d bytes: %v", n, err)
	}
	if inline {
		copy(b.Bytes(), req.GetValue())
		s.inlineBytes.Add(uint64(n))
		s.inlineReqs.Add(1)
	} else if n > 0 {
		p, err := s.owner(ctx, d)
		if err == nil {
			err = p.Read(ctx, b.Bytes()[:n], d.At(0))
			if err != nil {
				err = planeErr(ctx, "put", d, err)
			}
		}
		if err != nil {
			s.st.abort(b)
			return 0, 0, err
		}
		s.planeBytes.Add(uint64(n))
		s.planeReqs.Add(1)
	}
	if err := f.hold(req.Key, gen); err != nil {
		s.st.abort(b)
		return 0, 0, err
	}
	ver = s.st.commit(req.Key, b, n)
	f.release()
	return ver, uint32(evicted), nil
}

func (s *Server) tooLarge(n uint64) error {
	capacity := s.e.Pool().Stats().Capacity
	if n > capacity {
		return status.Errorf(codes.InvalidArgument, "value of %d bytes is larger than the whole pool (%d bytes)", n, capacity)
	}
	return status.Errorf(codes.InvalidArgument, "value of %d bytes is larger than the limit of %d", n, s.opts.MaxValue)
}

// Delete implements kvpb.KVServer.
func (s *Server) Delete(ctx context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return s.delete(req)
}

// delete serves a DELETE, from gRPC or the data plane.
func (s *Server) delete(req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	s.deletes.Add(1)
	if err := s.checkKey(req.Key); err != nil {
		return nil, err
	}
	f := s.fence.Load()
	gen, err := f.admit(req.Key)
	if err != nil {
		return nil, err
	}
	if err := f.hold(req.Key, gen); err != nil {
		return nil, err
	}
	removed := s.st.remove(req.Key)
	f.release()
	if !removed {
		return nil, status.Errorf(codes.NotFound, "not found: key %q", req.Key)
	}
	return &kvpb.DeleteResponse{}, nil
}

// Stats implements kvpb.KVServer.
func (s *Server) Stats(ctx context.Context, _ *kvpb.StatsRequest) (*kvpb.StatsResponse, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	st := s.Snapshot()
	return st.proto(), nil
}

// authorize authenticates a gRPC call (callAuth) before a handler reads or
// changes anything. The data plane's requests do not come through the
// handlers: they came on a connection that the engine's handshake
// authenticated.
func (s *Server) authorize(ctx context.Context) error { return s.auth.check(ctx) }

// Snapshot returns the server's counters.
func (s *Server) Snapshot() Stats {
	keys, bytes := s.st.counts()
	ps := s.e.Pool().Stats()
	return Stats{
		Keys: uint64(keys), ValueBytes: bytes, Capacity: ps.Capacity, PoolUsed: ps.InUse,
		Fragmentation: ps.Fragmentation,
		Gets:          s.gets.Load(), Hits: s.hits.Load(), Misses: s.misses.Load(),
		Puts: s.puts.Load(), Deletes: s.deletes.Load(),
		Evictions: s.st.evictions.Load(), RejectedFull: s.st.rejected.Load(),
		FullPolicy:     s.opts.Full,
		DataPlaneBytes: s.planeBytes.Load(), InlineBytes: s.inlineBytes.Load(),
		AbortedPuts: s.st.aborted.Load(),
	}
}

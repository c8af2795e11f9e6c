package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/transport"
)

// opBuckets are the latency histograms' buckets, in seconds: 1 µs to about
// 10 s, each about twice the last.
var opBuckets = prometheus.ExponentialBucketsRange(1e-6, 10, 24)

// Config is what New needs of the engine.
type Config struct {
	// Transports are the engine's transports: their series exist from the
	// start (at zero), so that rate() and the dashboard see them before
	// the first peer connects.
	Transports []Transport
	// FallbackFrom are the transports a peer can fall back from (all of
	// the engine's table but its last, which has nothing to fall back
	// to): their xfer_fallbacks_total series exist from the start.
	FallbackFrom []string
	// AuthPlane and AuthReasons: the series of xfer_auth_failures_total
	// with plane AuthPlane and each of AuthReasons exist from the start.
	AuthPlane   string
	AuthReasons []string
	// Source is what the collector reads of the engine when Prometheus
	// scrapes.
	Source Source
}

// Transport is one of the engine's transports: its name and what it can
// do (a transport that maps the peer's memory is sampled less often,
// SampleEvery).
type Transport struct {
	Name string
	Caps transport.Caps
}

// Set is an engine's Prometheus metrics. A nil *Set is an engine without
// metrics: the engine checks for nil before each use.
type Set struct {
	src   Source
	every map[string]uint8 // by transport name: SampleEvery of its caps

	errs         *prometheus.CounterVec   // op, kind
	lat          *prometheus.HistogramVec // op, transport
	fallback     *prometheus.CounterVec   // transport, reason
	retries      *prometheus.CounterVec   // transport, reason
	stalls       *prometheus.CounterVec   // transport
	failover     *prometheus.CounterVec   // from, to, reason
	authFailures *prometheus.CounterVec   // plane, reason

	// The counters of operations and bytes live in each connection's
	// Conn, plain atomics, and are summed when Prometheus scrapes: the
	// live connections' and, in retired, those of connections gone.
	mu      sync.Mutex
	per     map[string]*[NumOps]prometheus.Observer // latency histograms by transport name; bounded by the transports
	live    map[*Conn]struct{}
	retired map[string]*totals // by transport name

	descs descs
}

// New builds an engine's metrics and registers them on reg.
func New(reg prometheus.Registerer, cfg Config) (*Set, error) {
	m := &Set{
		src:     cfg.Source,
		every:   make(map[string]uint8, len(cfg.Transports)),
		per:     map[string]*[NumOps]prometheus.Observer{},
		live:    map[*Conn]struct{}{},
		retired: map[string]*totals{},
		descs:   newDescs(),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_op_errors_total",
			Help: "Operations that failed, by op and kind of error (closed, timeout, canceled, remote_access, too_large, not_registered, peer_lost, no_transport, auth, other).",
		}, []string{"op", "kind"}),
		lat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xfer_op_duration_seconds",
			Help:    "Latency of an operation from its start to its completion, for one operation in 16 (one in 128 on shm, where a small operation takes less time than reading the clock twice); for recv, how long Peer.Recv waited for a message (one call in 16).",
			Buckets: opBuckets,
		}, []string{"op", "transport"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_fallbacks_total",
			Help: "Peers that got a lesser transport than the auto policy preferred, by the transport given up and the reason (unusable, setup_failed, reconnected_lesser, unavailable).",
		}, []string{"transport", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_setup_retries_total",
			Help: "Connection setups that failed transiently and were tried again, by transport and reason.",
		}, []string{"transport", "reason"}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_peer_stalls_total",
			Help: "Connections closed because their peer made no progress for op_timeout while operations were outstanding, by transport.",
		}, []string{"transport"}),
		failover: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_failovers_total",
			Help: "Operations whose connection was lost and that were repeated on a new one, by the transport lost, the one they were repeated on, and the reason (connection_lost); and peers moved back to a paused transport that answered a probe (recovered).",
		}, []string{"from", "to", "reason"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_auth_failures_total",
			Help: "Callers refused for authentication, by plane (peer: the handshake; kv, transfer: services on the engine) and reason (no_proof, bad_proof, malformed, not_allowed, timeout).",
		}, []string{"plane", "reason"}),
	}
	cs := m.collectors()
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, d := range cs[:i] {
				reg.Unregister(d)
			}
			return nil, err
		}
	}
	for _, t := range cfg.Transports {
		m.every[t.Name] = SampleEvery(t.Caps)
		m.forTransport(t.Name)
	}
	for _, t := range cfg.FallbackFrom {
		for _, r := range fallbackReasons {
			m.fallback.WithLabelValues(t, r)
		}
	}
	for _, r := range cfg.AuthReasons {
		m.authFailures.WithLabelValues(cfg.AuthPlane, r)
	}
	for _, t := range cfg.Transports {
		m.retries.WithLabelValues(t.Name, ReasonTransient)
		m.stalls.WithLabelValues(t.Name)
	}
	return m, nil
}

// descs are the series read at scrape time.
type descs struct {
	ops, sent, received, served, servedBytes           *prometheus.Desc
	peers, poolUsed, poolFree, poolCap, poolFrag, regs *prometheus.Desc
	dirState, dirRereg                                 *prometheus.Desc
	railUp, railDown, railRepeated                     *prometheus.Desc
}

func newDescs() descs {
	return descs{
		ops: prometheus.NewDesc("xfer_ops_total",
			"Operations this engine started on a connection (write, read, write_imm, send; the failed ones are also in xfer_op_errors_total) or received (recv: messages delivered), by transport.",
			[]string{"op", "transport"}, nil),
		sent: prometheus.NewDesc("xfer_sent_bytes_total",
			"Payload bytes this engine's writes, write_imms and sends moved to peers.", []string{"transport"}, nil),
		received: prometheus.NewDesc("xfer_received_bytes_total",
			"Payload bytes this engine's reads fetched from peers and messages peers sent it.", []string{"transport"}, nil),
		served: prometheus.NewDesc("xfer_served_ops_total",
			"Peers' one-sided operations this engine served (op: write into its memory, read from it) where it sees them: on tcp, and on shm for private memory; shm's mapped memory and rdma are moved by the peer or the NIC alone.",
			[]string{"op", "transport"}, nil),
		servedBytes: prometheus.NewDesc("xfer_served_bytes_total",
			"Payload bytes of the operations xfer_served_ops_total counts.", []string{"op", "transport"}, nil),
		peers: prometheus.NewDesc("xfer_peers_connected",
			"Peers with a live connection, by transport and device (the rdma device; empty for tcp and shm).",
			[]string{"transport", "device"}, nil),
		poolUsed: prometheus.NewDesc("xfer_pool_used_bytes", "Bytes of the engine's default pool in allocated buffers.", nil, nil),
		poolFree: prometheus.NewDesc("xfer_pool_free_bytes", "Free bytes of the engine's default pool.", nil, nil),
		poolCap:  prometheus.NewDesc("xfer_pool_capacity_bytes", "Size of the engine's default pool.", nil, nil),
		poolFrag: prometheus.NewDesc("xfer_pool_fragmentation_ratio",
			"How splintered the pool's free space is: 1 - largest free block / free bytes (0: one block).", nil, nil),
		regs: prometheus.NewDesc("xfer_registered_regions", "Regions registered with the engine, its pool's included.", nil, nil),
		dirState: prometheus.NewDesc("xfer_directory_registration",
			"1 for the state the engine's directory entry is in (registered, retrying: renewals failing, lost: registering again), 0 for the others; only with a node ID.",
			[]string{"state"}, nil),
		dirRereg: prometheus.NewDesc("xfer_directory_reregistrations_total",
			"How often the engine's directory entry was lost (lease expired, process paused, coordinator restarted) and registered again.", nil, nil),
		railUp: prometheus.NewDesc("xfer_rail_up", "1 while a device of a transport over several (rdma.devices) is usable, 0 while it is down.",
			[]string{"transport", "device"}, nil),
		railDown: prometheus.NewDesc("xfer_rail_failures_total", "Times a device of a transport over several failed under a live connection and was taken out of it.",
			[]string{"transport", "device"}, nil),
		railRepeated: prometheus.NewDesc("xfer_rail_failovers_total",
			"Operations in flight on a device that failed, repeated on another device of the same connection (no error to the caller).",
			[]string{"transport", "device"}, nil),
	}
}

// collectors lists what the engine registers: its vectors, and the Set
// itself for the values read at scrape time (Describe, Collect).
func (m *Set) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.errs, m.lat, m.fallback, m.retries, m.stalls, m.failover, m.authFailures, m}
}

// Unregister removes the engine's collectors from reg (Engine.Close), so
// that a new engine can register on the same registry.
func (m *Set) Unregister(reg prometheus.Registerer) {
	for _, c := range m.collectors() {
		reg.Unregister(c)
	}
}

// forTransport returns the latency histograms of transport name,
// resolving them on first use.
func (m *Set) forTransport(name string) *[NumOps]prometheus.Observer {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.per[name]; t != nil {
		return t
	}
	t := &[NumOps]prometheus.Observer{}
	for i := range NumOps {
		t[i] = m.lat.WithLabelValues(opNames[i], name)
	}
	m.per[name] = t
	if m.retired[name] == nil {
		m.retired[name] = &totals{}
	}
	return t
}

// NewConn returns the counters of a new connection, ep, and retires
// old's (the connection it replaces; nil for none).
func (m *Set) NewConn(ep transport.Endpoint, old *Conn) *Conn {
	name := ep.Transport()
	every, ok := m.every[name]
	if !ok {
		every = SampleEvery(transport.Caps{})
	}
	c := &Conn{transport: name, lat: m.forTransport(name), every: every}
	if n, ok := ep.(transport.Counter); ok {
		c.counter = n
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retireLocked(old)
	m.live[c] = struct{}{}
	return c
}

// Retire moves a connection's counters into the totals of connections
// gone, once: they stay in the sums, and the connection leaves the
// scrape. A nil c is none.
func (m *Set) Retire(c *Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retireLocked(c)
}

func (m *Set) retireLocked(c *Conn) {
	if c == nil {
		return
	}
	if _, ok := m.live[c]; !ok {
		return
	}
	delete(m.live, c)
	m.retired[c.transport].add(c)
}

// The engine's events. Off the hot path: each resolves its labels.

// OpFailed counts a failed operation of kind op, whose error is of kind
// kind (the engine classifies its errors).
func (m *Set) OpFailed(op Op, kind string) {
	m.errs.WithLabelValues(opNames[op], kind).Inc()
}

// FellBack counts a fallback from transport t for a reason (one of the
// fallback reasons).
func (m *Set) FellBack(t, reason string) {
	m.fallback.WithLabelValues(t, reason).Inc()
}

// FailedOver counts a failover from transport from to transport to, for a
// reason (ReasonConnLost, ReasonPathFailed, ReasonRecovered).
func (m *Set) FailedOver(from, to, reason string) {
	m.failover.WithLabelValues(from, to, reason).Inc()
}

// SetupRetried counts a transient setup failure on transport t that is
// tried again.
func (m *Set) SetupRetried(t string) {
	m.retries.WithLabelValues(t, ReasonTransient).Inc()
}

// Stalled counts a connection on transport t closed for its peer's stall.
func (m *Set) Stalled(t string) {
	m.stalls.WithLabelValues(t).Inc()
}

// AuthFailed counts a caller refused for authentication on plane, for a
// reason.
func (m *Set) AuthFailed(plane, reason string) {
	m.authFailures.WithLabelValues(plane, reason).Inc()
}

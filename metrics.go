package xfer

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/directory"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/transport"
)

// The operations the metrics name (their op label), indexed by opIndex.
const (
	mSend = iota
	mRecv
	mWrite
	mRead
	mWriteImm
	numOps
)

var opNames = [numOps]string{"send", "recv", "write", "read", "write_imm"}

func opIndex(k OpKind) int {
	switch k {
	case OpWrite:
		return mWrite
	case OpRead:
		return mRead
	case OpWriteNotify:
		return mWriteImm
	}
	return mSend
}

// Fallback reasons, the reason label of xfer_fallbacks_total: a bounded
// set, unlike the error text, which the status API and the log carry.
const (
	// reasonUnusable: the transport was offered but cannot reach this peer
	// (another host for shm, different link layers for rdma).
	reasonUnusable = "unusable"
	// reasonSetupFailed: the transport was chosen but its connection could
	// not be set up, and the dialer tried the next one.
	reasonSetupFailed = "setup_failed"
	// reasonReconnected: a peer reconnected on a lesser transport than it
	// had (its rdma device went away, say).
	reasonReconnected = "reconnected_lesser"
	// reasonUnavailable: the configuration names the transport's device
	// (rdma.device), and the transport cannot open it, so the auto policy
	// goes without it from the start.
	reasonUnavailable = "unavailable"
	// reasonConnLost: an operation's connection was lost, and the
	// operation was repeated on a new one (xfer_failovers_total).
	reasonConnLost = "connection_lost"
	// reasonPathFailed: a connection's own data path (rdma's queue pairs)
	// failed, and the connection carries on over its control connection.
	reasonPathFailed = "path_failed"
	// reasonTransient: a setup failed transiently and was tried again
	// (xfer_setup_retries_total).
	reasonTransient = "transient"
)

// opBuckets are the latency histograms' buckets, in seconds: 1 µs to about
// 10 s, each about twice the last.
var opBuckets = prometheus.ExponentialBucketsRange(1e-6, 10, 24)

// engineMetrics are an engine's Prometheus metrics (Config.Metrics). A nil
// *engineMetrics is an engine without metrics: every hot-path use checks
// for nil first, and costs nothing more.
type engineMetrics struct {
	e *Engine

	errs         *prometheus.CounterVec   // op, kind
	lat          *prometheus.HistogramVec // op, transport
	fallback     *prometheus.CounterVec   // transport, reason
	retries      *prometheus.CounterVec   // transport, reason
	stalls       *prometheus.CounterVec   // transport
	failover     *prometheus.CounterVec   // from, to, reason
	authFailures *prometheus.CounterVec   // plane, reason

	// The counters of operations and bytes live in each connection's
	// connStats, plain atomics, and are summed when Prometheus scrapes:
	// the live connections' and, in retired, those of connections gone.
	mu      sync.Mutex
	per     map[string]*transportMetrics // by transport name; bounded by the transports
	live    map[*connStats]struct{}
	retired map[string]*connTotals // by transport name

	opsDesc, sentDesc, receivedDesc, servedDesc, servedBytesDesc                  *prometheus.Desc
	peersDesc, poolUsedDesc, poolFreeDesc, poolCapDesc, poolFragDesc, regionsDesc *prometheus.Desc
	dirStateDesc, dirReregDesc                                                    *prometheus.Desc
	railUpDesc, railDownDesc, railRepeatedDesc                                    *prometheus.Desc
}

// connStats are one connection's (one endpoint's) counters. An endpoint
// that counts its own operations (transport.Counter: tcp's and shm's,
// under the lock or atomic each operation takes there anyway) is read
// when Prometheus scrapes, and the hot path adds nothing for its
// operations but the latency samples; ops, sent and received then hold
// only what never reached the endpoint (operations that failed before it
// was posted to) and the messages received. For the others (rdma) the hot
// path adds to them with atomics: no label lookup, no allocation, no
// float CAS.
type connStats struct {
	transport string
	lat       *[numOps]prometheus.Observer // the transport's latency histograms
	counter   transport.Counter            // the endpoint, when it counts its own operations
	every     uint8                        // one operation in every is timed (sampleEvery)

	ops         [numOps]atomic.Uint64
	sent        atomic.Uint64
	received    atomic.Uint64
	served      [2]atomic.Uint64 // peers' one-sided writes [0] and reads [1] served
	servedBytes [2]atomic.Uint64
}

// connTotals are counters of connections that are gone.
type connTotals struct {
	ops                 [numOps]uint64
	sent, received      uint64
	served, servedBytes [2]uint64
}

func (t *connTotals) add(c *connStats) {
	for i := range t.ops {
		t.ops[i] += c.ops[i].Load()
	}
	t.sent += c.sent.Load()
	t.received += c.received.Load()
	if c.counter != nil {
		n := c.counter.Counts()
		for k, v := range n.Ops {
			if k != 0 {
				t.ops[opIndex(OpKind(k))] += v
			}
		}
		t.sent += n.Sent
		t.received += n.Received
	}
	for i := range 2 {
		t.served[i] += c.served[i].Load()
		t.servedBytes[i] += c.servedBytes[i].Load()
	}
}

// opsAndBytes are the connection's operations, served ones included, and
// their bytes both ways, for the status API.
func (c *connStats) opsAndBytes() (ops, bytes uint64) {
	var t connTotals
	t.add(c)
	for _, n := range t.ops {
		ops += n
	}
	ops += t.served[0] + t.served[1]
	bytes = t.sent + t.received + t.servedBytes[0] + t.servedBytes[1]
	return ops, bytes
}

// latencyEvery is how often an operation is timed for the latency
// histograms: one in latencyEvery. Reading the clock twice and observing
// costs about 110 ns here (less on a quiet machine, more under load); one
// in 16 spreads it to a few ns, nothing beside an operation of
// microseconds (tcp, rdma), while a steady stream still yields plenty of
// samples. A synchronous Write or Read counts down to its next sample in
// its pooled call; a Batch and a Recv draw from the runtime's per-thread
// generator (math/rand/v2). Neither is an atomic shared between cores.
const latencyEvery = 16

// latencyEveryCopy is latencyEvery on a transport that maps the peer's
// memory (shm), where a small operation is a copy of about 100 ns, less
// than the clock's two reads: one in 16 would still cost about 10% of it,
// one in 128 about 1%.
const latencyEveryCopy = 128

// sampleEvery is latencyEvery for a transport with caps c.
func sampleEvery(c transport.Caps) uint8 {
	if c.MapsMemory {
		return latencyEveryCopy
	}
	return latencyEvery
}

// transportMetrics are the children of the vectors for one transport,
// resolved once when a peer's endpoint is set, so that an operation only
// adds and observes: no label lookup, no allocation.
type transportMetrics struct {
	lat [numOps]prometheus.Observer
}

func newEngineMetrics(e *Engine, reg prometheus.Registerer) (*engineMetrics, error) {
	m := &engineMetrics{
		e:       e,
		per:     map[string]*transportMetrics{},
		live:    map[*connStats]struct{}{},
		retired: map[string]*connTotals{},
		opsDesc: prometheus.NewDesc("xfer_ops_total",
			"Operations this engine started on a connection (write, read, write_imm, send; the failed ones are also in xfer_op_errors_total) or received (recv: messages delivered), by transport.",
			[]string{"op", "transport"}, nil),
		sentDesc: prometheus.NewDesc("xfer_sent_bytes_total",
			"Payload bytes this engine's writes, write_imms and sends moved to peers.", []string{"transport"}, nil),
		receivedDesc: prometheus.NewDesc("xfer_received_bytes_total",
			"Payload bytes this engine's reads fetched from peers and messages peers sent it.", []string{"transport"}, nil),
		servedDesc: prometheus.NewDesc("xfer_served_ops_total",
			"Peers' one-sided operations this engine served (op: write into its memory, read from it) where it sees them: on tcp, and on shm for private memory; shm's mapped memory and rdma are moved by the peer or the NIC alone.",
			[]string{"op", "transport"}, nil),
		servedBytesDesc: prometheus.NewDesc("xfer_served_bytes_total",
			"Payload bytes of the operations xfer_served_ops_total counts.", []string{"op", "transport"}, nil),
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
		peersDesc: prometheus.NewDesc("xfer_peers_connected",
			"Peers with a live connection, by transport and device (the rdma device; empty for tcp and shm).",
			[]string{"transport", "device"}, nil),
		poolUsedDesc: prometheus.NewDesc("xfer_pool_used_bytes", "Bytes of the engine's default pool in allocated buffers.", nil, nil),
		poolFreeDesc: prometheus.NewDesc("xfer_pool_free_bytes", "Free bytes of the engine's default pool.", nil, nil),
		poolCapDesc:  prometheus.NewDesc("xfer_pool_capacity_bytes", "Size of the engine's default pool.", nil, nil),
		poolFragDesc: prometheus.NewDesc("xfer_pool_fragmentation_ratio",
			"How splintered the pool's free space is: 1 - largest free block / free bytes (0: one block).", nil, nil),
		regionsDesc: prometheus.NewDesc("xfer_registered_regions", "Regions registered with the engine, its pool's included.", nil, nil),
		dirStateDesc: prometheus.NewDesc("xfer_directory_registration",
			"1 for the state the engine's directory entry is in (registered, retrying: renewals failing, lost: registering again), 0 for the others; only with a node ID.",
			[]string{"state"}, nil),
		dirReregDesc: prometheus.NewDesc("xfer_directory_reregistrations_total",
			"How often the engine's directory entry was lost (lease expired, process paused, coordinator restarted) and registered again.", nil, nil),
		railUpDesc: prometheus.NewDesc("xfer_rail_up", "1 while a device of a transport over several (rdma.devices) is usable, 0 while it is down.",
			[]string{"transport", "device"}, nil),
		railDownDesc: prometheus.NewDesc("xfer_rail_failures_total", "Times a device of a transport over several failed under a live connection and was taken out of it.",
			[]string{"transport", "device"}, nil),
		railRepeatedDesc: prometheus.NewDesc("xfer_rail_failovers_total",
			"Operations in flight on a device that failed, repeated on another device of the same connection (no error to the caller).",
			[]string{"transport", "device"}, nil),
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
	// Every transport's series exist from the start (at zero), so that
	// rate() and the dashboard see them before the first peer connects.
	for name := range e.transports {
		m.forTransport(name)
	}
	names := transportNames()
	for _, t := range names[:len(names)-1] { // the last one has nothing to fall back to
		for _, r := range []string{reasonUnusable, reasonSetupFailed, reasonReconnected, reasonUnavailable} {
			m.fallback.WithLabelValues(t, r)
		}
	}
	for _, r := range authReasons {
		m.authFailures.WithLabelValues(PlanePeer, r)
	}
	for name := range e.transports {
		m.retries.WithLabelValues(name, reasonTransient)
		m.stalls.WithLabelValues(name)
	}
	return m, nil
}

// collectors lists what the engine registers: its vectors, and itself for
// the values read at scrape time (Describe, Collect).
func (m *engineMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.errs, m.lat, m.fallback, m.retries, m.stalls, m.failover, m.authFailures, m}
}

// unregister removes the engine's collectors (Engine.Close), so that a new
// engine can register on the same registry.
func (m *engineMetrics) unregister(reg prometheus.Registerer) {
	for _, c := range m.collectors() {
		reg.Unregister(c)
	}
}

// forTransport returns the children for transport name, resolving them on
// first use.
func (m *engineMetrics) forTransport(name string) *transportMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.per[name]; t != nil {
		return t
	}
	t := &transportMetrics{}
	for i := range numOps {
		t.lat[i] = m.lat.WithLabelValues(opNames[i], name)
	}
	m.per[name] = t
	if m.retired[name] == nil {
		m.retired[name] = &connTotals{}
	}
	return t
}

// newConn returns the counters of a new connection on transport name, and
// retires old's (the connection it replaces; nil for none).
func (m *engineMetrics) newConn(ep transport.Endpoint, old *connStats) *connStats {
	name := ep.Transport()
	t := m.forTransport(name)
	c := &connStats{transport: name, lat: &t.lat, every: sampleEvery(m.e.caps(name))}
	if n, ok := ep.(transport.Counter); ok {
		c.counter = n
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retireLocked(old)
	m.live[c] = struct{}{}
	return c
}

// retire moves a connection's counters into the totals of connections
// gone, once: they stay in the sums, and the connection leaves the scrape.
func (m *engineMetrics) retire(c *connStats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retireLocked(c)
}

func (m *engineMetrics) retireLocked(c *connStats) {
	if c == nil {
		return
	}
	if _, ok := m.live[c]; !ok {
		return
	}
	delete(m.live, c)
	m.retired[c.transport].add(c)
}

// Describe implements prometheus.Collector for the gauges read at scrape
// time.
func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.opsDesc
	ch <- m.sentDesc
	ch <- m.receivedDesc
	ch <- m.servedDesc
	ch <- m.servedBytesDesc
	ch <- m.peersDesc
	ch <- m.poolUsedDesc
	ch <- m.poolFreeDesc
	ch <- m.poolCapDesc
	ch <- m.poolFragDesc
	ch <- m.regionsDesc
	ch <- m.dirStateDesc
	ch <- m.railUpDesc
	ch <- m.railDownDesc
	ch <- m.railRepeatedDesc
	ch <- m.dirReregDesc
}

// Collect implements prometheus.Collector: connected peers, the pool and
// the region table, read when Prometheus scrapes, not kept up to date on
// the hot path.
func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	e := m.e
	m.mu.Lock()
	sums := make(map[string]*connTotals, len(m.retired))
	for name, r := range m.retired {
		t := *r
		sums[name] = &t
	}
	for c := range m.live {
		sums[c.transport].add(c)
	}
	m.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for name, t := range sums {
		for i := range numOps {
			counter(m.opsDesc, t.ops[i], opNames[i], name)
		}
		counter(m.sentDesc, t.sent, name)
		counter(m.receivedDesc, t.received, name)
		for i, op := range []string{"write", "read"} {
			counter(m.servedDesc, t.served[i], op, name)
			counter(m.servedBytesDesc, t.servedBytes[i], op, name)
		}
	}
	for name, t := range e.transports {
		for _, r := range t.Devices().Rails {
			up := 0.0
			if r.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(m.railUpDesc, prometheus.GaugeValue, up, name, r.Device)
			counter(m.railDownDesc, r.Down, name, r.Device)
			counter(m.railRepeatedDesc, r.Repeated, name, r.Device)
		}
	}
	type key struct{ transport, device string }
	counts := map[key]int{}
	for name := range e.transports {
		counts[key{name, e.deviceOf(name)}] = 0
	}
	for _, p := range e.Peers() {
		ep := p.current()
		if ep == nil {
			continue
		}
		select {
		case <-ep.Done():
			continue
		default:
		}
		counts[key{ep.Transport(), e.deviceOf(ep.Transport())}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(m.peersDesc, prometheus.GaugeValue, float64(n), k.transport, k.device)
	}
	ps := e.pool.Stats()
	ch <- prometheus.MustNewConstMetric(m.poolUsedDesc, prometheus.GaugeValue, float64(ps.InUse))
	ch <- prometheus.MustNewConstMetric(m.poolFreeDesc, prometheus.GaugeValue, float64(ps.Free))
	ch <- prometheus.MustNewConstMetric(m.poolCapDesc, prometheus.GaugeValue, float64(ps.Capacity))
	ch <- prometheus.MustNewConstMetric(m.poolFragDesc, prometheus.GaugeValue, ps.Fragmentation)
	ch <- prometheus.MustNewConstMetric(m.regionsDesc, prometheus.GaugeValue, float64(e.regions.count()))
	if r, ok := e.registration(); ok {
		for _, st := range []directory.RegState{directory.Registered, directory.Retrying, directory.Lost} {
			v := 0.0
			if r.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(m.dirStateDesc, prometheus.GaugeValue, v, string(st))
		}
		counter(m.dirReregDesc, r.Reregistrations)
	}
}

// deviceOf names the device a transport uses: the rdma device it has
// open, "" for the others.
func (e *Engine) deviceOf(transportName string) string {
	if t := e.transports[transportName]; t != nil {
		if d := t.Devices().InUse; d != nil {
			return d.Device
		}
	}
	return ""
}

// errorKind classifies err for the kind label of xfer_op_errors_total.
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, ErrStalled):
		return "stalled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrRemoteAccess):
		return "remote_access"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrNotRegistered):
		return "not_registered"
	case errors.Is(err, ErrPathFailed):
		return "path_failed"
	case errors.Is(err, ErrPeerLost):
		return "peer_lost"
	case errors.Is(err, ErrNoTransport), errors.Is(err, ErrNotSupported):
		return "no_transport"
	case errors.Is(err, ErrAuth):
		return "auth"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	return "other"
}

// opFailed counts a failed operation and records it as the peer's last
// error. Off the hot path: it resolves its labels each time.
func (m *engineMetrics) opFailed(p *Peer, op int, err error) {
	m.errs.WithLabelValues(opNames[op], errorKind(err)).Inc()
	p.stats.setErr(err)
}

// fellBack counts and records a fallback from transport t for a reason
// (one of the reason constants), and logs it (at Warn once per peer and
// reason; detail is the error text).
func (e *Engine) fellBack(peer, t, reason, detail, msg string, args ...any) {
	e.stats.fallbacks.Add(1)
	if m := e.metrics; m != nil {
		m.fallback.WithLabelValues(t, reason).Inc()
	}
	e.stats.recordFallback(FallbackEvent{Time: time.Now(), Peer: peer, Transport: t, Reason: reason, Detail: detail})
	e.warnFallback(peer, t+": "+detail, msg, args...)
}

// failedOver records that an operation of kind, whose connection on
// transport from was lost, completed on transport to after attempts posts:
// counted, shown in the status, and logged at Warn once per peer and pair
// of transports.
func (p *Peer) failedOver(from, to string, kind OpKind, attempts int) {
	e := p.e
	e.stats.recordFailover(FailoverEvent{Time: time.Now(), Peer: p.String(), From: from, To: to, Op: kind.String(), Attempts: attempts + 1, Reason: reasonConnLost})
	if m := e.metrics; m != nil {
		m.failover.WithLabelValues(from, to, reasonConnLost).Inc()
	}
	e.warnFallback(p.String(), "failover "+from+" to "+to, "connection lost under an operation; it was repeated on a new connection",
		"op", kind, "from", from, "to", to)
}

// setupRetried counts a transient setup failure that is tried again.
func (e *Engine) setupRetried(t string) {
	e.stats.setupRetries.Add(1)
	if m := e.metrics; m != nil {
		m.retries.WithLabelValues(t, reasonTransient).Inc()
	}
}

// The hot path's hooks. Each is reached only when the engine has metrics.

// sampleStart returns the time to measure an operation from when it is
// one of those timed for the latency histograms (one in every, at
// random), else the zero time.
func sampleStart(every uint8) time.Time {
	if rand.Uint32()%uint32(every) == 0 {
		return time.Now()
	}
	return time.Time{}
}

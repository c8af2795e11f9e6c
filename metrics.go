package xfer

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/verbs"
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

	ops      *prometheus.CounterVec   // op, transport
	errs     *prometheus.CounterVec   // op, kind
	lat      *prometheus.HistogramVec // op, transport
	sent     *prometheus.CounterVec   // transport
	received *prometheus.CounterVec   // transport
	fallback *prometheus.CounterVec   // transport, reason
	retries  *prometheus.CounterVec   // transport, reason
	served   *prometheus.CounterVec   // op, transport
	servedB  *prometheus.CounterVec   // op, transport

	mu  sync.Mutex
	per map[string]*transportMetrics // by transport name; bounded by the transports

	peersDesc, poolUsedDesc, poolFreeDesc, poolCapDesc, poolFragDesc, regionsDesc *prometheus.Desc
}

// transportMetrics are the children of the vectors for one transport,
// resolved once when a peer's endpoint is set, so that an operation only
// adds and observes: no label lookup, no allocation.
type transportMetrics struct {
	ops      [numOps]prometheus.Counter
	lat      [numOps]prometheus.Observer
	sent     prometheus.Counter
	received prometheus.Counter
	// served and servedBytes count peers' one-sided operations this
	// engine served, [0] writes into its memory and [1] reads from it.
	served      [2]prometheus.Counter
	servedBytes [2]prometheus.Counter
}

func newEngineMetrics(e *Engine, reg prometheus.Registerer) (*engineMetrics, error) {
	m := &engineMetrics{
		e:   e,
		per: map[string]*transportMetrics{},
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_ops_total",
			Help: "Operations this engine started (write, read, write_imm, send) or received (recv: messages delivered), by transport.",
		}, []string{"op", "transport"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_op_errors_total",
			Help: "Operations that failed, by op and kind of error (closed, timeout, canceled, remote_access, too_large, not_registered, peer_lost, no_transport, auth, other).",
		}, []string{"op", "kind"}),
		lat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xfer_op_duration_seconds",
			Help:    "Latency of an operation from its start to its completion; for recv, how long Peer.Recv waited for a message.",
			Buckets: opBuckets,
		}, []string{"op", "transport"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_sent_bytes_total",
			Help: "Payload bytes this engine's writes, write_imms and sends moved to peers.",
		}, []string{"transport"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_received_bytes_total",
			Help: "Payload bytes this engine's reads fetched from peers and messages peers sent it.",
		}, []string{"transport"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_fallbacks_total",
			Help: "Peers that got a lesser transport than the auto policy preferred, by the transport given up and the reason (unusable, setup_failed, reconnected_lesser).",
		}, []string{"transport", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_setup_retries_total",
			Help: "Connection setups that failed transiently and were tried again, by transport and reason.",
		}, []string{"transport", "reason"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_served_ops_total",
			Help: "Peers' one-sided operations this engine served (op: write into its memory, read from it) where it sees them: on tcp, and on shm for private memory; shm's mapped memory and rdma are moved by the peer or the NIC alone.",
		}, []string{"op", "transport"}),
		servedB: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_served_bytes_total",
			Help: "Payload bytes of the operations xfer_served_ops_total counts.",
		}, []string{"op", "transport"}),
		peersDesc: prometheus.NewDesc("xfer_peers_connected",
			"Peers with a live connection, by transport and device (the rdma device; empty for tcp and shm).",
			[]string{"transport", "device"}, nil),
		poolUsedDesc: prometheus.NewDesc("xfer_pool_used_bytes", "Bytes of the engine's default pool in allocated buffers.", nil, nil),
		poolFreeDesc: prometheus.NewDesc("xfer_pool_free_bytes", "Free bytes of the engine's default pool.", nil, nil),
		poolCapDesc:  prometheus.NewDesc("xfer_pool_capacity_bytes", "Size of the engine's default pool.", nil, nil),
		poolFragDesc: prometheus.NewDesc("xfer_pool_fragmentation_ratio",
			"How splintered the pool's free space is: 1 - largest free block / free bytes (0: one block).", nil, nil),
		regionsDesc: prometheus.NewDesc("xfer_registered_regions", "Regions registered with the engine, its pool's included.", nil, nil),
	}
	cs := []prometheus.Collector{m.ops, m.errs, m.lat, m.sent, m.received, m.fallback, m.retries, m.served, m.servedB, m}
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
	for _, t := range []string{"rdma", "shm"} {
		for _, r := range []string{reasonUnusable, reasonSetupFailed, reasonReconnected} {
			m.fallback.WithLabelValues(t, r)
		}
	}
	for name := range e.transports {
		m.retries.WithLabelValues(name, reasonTransient)
	}
	return m, nil
}

// unregister removes the engine's collectors (Engine.Close), so that a new
// engine can register on the same registry.
func (m *engineMetrics) unregister(reg prometheus.Registerer) {
	for _, c := range []prometheus.Collector{m.ops, m.errs, m.lat, m.sent, m.received, m.fallback, m.retries, m.served, m.servedB, m} {
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
	t := &transportMetrics{
		sent:     m.sent.WithLabelValues(name),
		received: m.received.WithLabelValues(name),
	}
	for i := range numOps {
		t.ops[i] = m.ops.WithLabelValues(opNames[i], name)
		t.lat[i] = m.lat.WithLabelValues(opNames[i], name)
	}
	for i, op := range []string{"write", "read"} {
		t.served[i] = m.served.WithLabelValues(op, name)
		t.servedBytes[i] = m.servedB.WithLabelValues(op, name)
	}
	m.per[name] = t
	return t
}

// Describe implements prometheus.Collector for the gauges read at scrape
// time.
func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.peersDesc
	ch <- m.poolUsedDesc
	ch <- m.poolFreeDesc
	ch <- m.poolCapDesc
	ch <- m.poolFragDesc
	ch <- m.regionsDesc
}

// Collect implements prometheus.Collector: connected peers, the pool and
// the region table, read when Prometheus scrapes, not kept up to date on
// the hot path.
func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	e := m.e
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
}

// deviceOf names the device a transport uses: the rdma device it has
// open, "" for the others.
func (e *Engine) deviceOf(transportName string) string {
	if v, ok := e.transports[transportName].(*verbs.Transport); ok {
		if d, ok := v.InUse(); ok {
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
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrRemoteAccess):
		return "remote_access"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrNotRegistered):
		return "not_registered"
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

// setupRetried counts a transient setup failure that is tried again.
func (e *Engine) setupRetried(t string) {
	e.stats.setupRetries.Add(1)
	if m := e.metrics; m != nil {
		m.retries.WithLabelValues(t, reasonTransient).Inc()
	}
}

// Observe hooks of the hot path. Each is a nil check when the engine has no
// metrics.

// opDone records one finished operation of kind op, of n bytes, on tm's
// transport, started at start.
func (p *Peer) opDone(tm *transportMetrics, op int, n int, start time.Time, err error) {
	m := p.e.metrics
	if err != nil {
		m.opFailed(p, op, err)
		return
	}
	if tm == nil {
		return
	}
	tm.lat[op].Observe(time.Since(start).Seconds())
	tm.ops[op].Inc()
	switch op {
	case mRead, mRecv:
		tm.received.Add(float64(n))
	default:
		tm.sent.Add(float64(n))
	}
	p.stats.ops.Add(1)
	p.stats.bytes.Add(uint64(n))
}

// handled counts a message of n bytes delivered to the peer's handler
// (Peer.Handle): a recv without a latency, since nobody waited in Recv.
func (p *Peer) handled(n int) {
	if tm := p.stats.tm.Load(); tm != nil {
		tm.ops[mRecv].Inc()
		tm.received.Add(float64(n))
	}
	p.stats.ops.Add(1)
	p.stats.bytes.Add(uint64(n))
}

// served counts a peer's one-sided access of n bytes that this engine
// resolved (transport.Host.Resolve): a write into its memory or a read.
func (p *Peer) served(want Access, n uint64) {
	tm := p.stats.tm.Load()
	if tm == nil {
		return // the endpoint serves a moment before the peer publishes it
	}
	i := 0
	if want == AccessRead {
		i = 1
	}
	tm.served[i].Inc()
	tm.servedBytes[i].Add(float64(n))
	p.stats.ops.Add(1)
	p.stats.bytes.Add(n)
}

var _ transport.Completer = (*Batch)(nil)

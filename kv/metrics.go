package kv

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// serverMetrics exposes a server's counters (Server.Snapshot) to
// Prometheus when it scrapes: requests keep only the atomic counters they
// always had.
type serverMetrics struct {
	s *Server

	gets, puts, deletes, hits, misses, evictions, rejected, aborted *prometheus.Desc
	keys, stored, capacity, used, frag                              *prometheus.Desc
	requests, valueBytes                                            *prometheus.Desc
	// the disk tier's, collected only with one
	tierBytes, tierHits, diskCapacity, promotions, demotions, queue *prometheus.Desc
	diskEvictions, ioErrors, corrupt, dropped                       *prometheus.Desc
	// the fence's, collected only in a cluster
	serving, breaks, moved *prometheus.Desc
}

func newServerMetrics(s *Server) *serverMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &serverMetrics{
		s:          s,
		gets:       d("xfer_kv_gets_total", "GET requests the KV server received."),
		puts:       d("xfer_kv_puts_total", "PUT requests the KV server received."),
		deletes:    d("xfer_kv_deletes_total", "DELETE requests the KV server received."),
		hits:       d("xfer_kv_hits_total", "GETs of a valid key that found a value."),
		misses:     d("xfer_kv_misses_total", "GETs of a valid key that found none."),
		evictions:  d("xfer_kv_evictions_total", "Values evicted to make room for PUTs (full: evict)."),
		rejected:   d("xfer_kv_rejected_puts_total", "PUTs refused because the pool was full (full: reject)."),
		aborted:    d("xfer_kv_aborted_puts_total", "PUTs that failed after reserving room (the client died, its buffer was refused)."),
		keys:       d("xfer_kv_keys", "Keys stored."),
		stored:     d("xfer_kv_stored_bytes", "Bytes of the values stored."),
		capacity:   d("xfer_kv_pool_capacity_bytes", "Size of the value pool."),
		used:       d("xfer_kv_pool_used_bytes", "Bytes of the value pool that values and PUTs in progress hold."),
		frag:       d("xfer_kv_pool_fragmentation_ratio", "How splintered the value pool's free space is (0 to 1)."),
		requests:   d("xfer_kv_requests_total", "GETs and PUTs that moved a value, by path: inline (inside the request or response message) or data_plane (a one-sided transfer).", "path"),
		valueBytes: d("xfer_kv_value_bytes_total", "Value bytes GETs and PUTs moved, by path (inline, data_plane).", "path"),

		tierBytes:     d("xfer_kv_tier_bytes", "Bytes each tier holds, by tier: memory (the values in the pool), disk (the disk tier's records).", "tier"),
		tierHits:      d("xfer_kv_tier_hits_total", "GETs that found a value, by the tier it was in: memory, disk.", "tier"),
		diskCapacity:  d("xfer_kv_disk_capacity_bytes", "Size of the disk tier's ring of records."),
		promotions:    d("xfer_kv_disk_promotions_total", "Values read back from the disk tier into memory."),
		demotions:     d("xfer_kv_disk_demotions_total", "Values eviction wrote to the disk tier."),
		queue:         d("xfer_kv_disk_queue_depth", "Values whose write to the disk tier is queued or under way."),
		diskEvictions: d("xfer_kv_disk_evictions_total", "Values only on disk that the disk tier overwrote to make room."),
		ioErrors:      d("xfer_kv_disk_io_errors_total", "Reads and writes of the disk tier that failed, by op.", "op"),
		corrupt:       d("xfer_kv_disk_corrupt_records_total", "Records of the disk tier found torn or corrupt, at start-up or when read; never served."),
		dropped:       d("xfer_kv_disk_dropped_total", "Values dropped instead of kept on disk, by reason: too_large (larger than the tier), write_error, read (a read that failed or found it corrupt).", "reason"),

		serving: d("xfer_kv_fence_serving", "1 while this server of a cluster answers: its view of the directory is confirmed as of less than fresh ago and its lease is live; else 0."),
		breaks:  d("xfer_kv_fence_breaks_total", "Times this server of a cluster lost continuity with the directory (paused, cut off, its entry lost, its watch reset) and dropped every value."),
		moved:   d("xfer_kv_fence_moved_dropped_total", "Values this server of a cluster dropped because a server that joined took their keys."),
	}
}

// Describe implements prometheus.Collector.
func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.gets, m.puts, m.deletes, m.hits, m.misses, m.evictions, m.rejected, m.aborted,
		m.keys, m.stored, m.capacity, m.used, m.frag, m.requests, m.valueBytes,
		m.tierBytes, m.tierHits, m.diskCapacity, m.promotions, m.demotions, m.queue, m.diskEvictions, m.ioErrors, m.corrupt, m.dropped,
		m.serving, m.breaks, m.moved} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Snapshot()
	c := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c(m.gets, st.Gets)
	c(m.puts, st.Puts)
	c(m.deletes, st.Deletes)
	c(m.hits, st.Hits)
	c(m.misses, st.Misses)
	c(m.evictions, st.Evictions)
	c(m.rejected, st.RejectedFull)
	c(m.aborted, st.AbortedPuts)
	g(m.keys, float64(st.Keys))
	g(m.stored, float64(st.ValueBytes))
	g(m.capacity, float64(st.Capacity))
	g(m.used, float64(st.PoolUsed))
	g(m.frag, st.Fragmentation)
	c(m.requests, m.s.inlineReqs.Load(), "inline")
	c(m.requests, m.s.planeReqs.Load(), "data_plane")
	c(m.valueBytes, st.InlineBytes, "inline")
	c(m.valueBytes, st.DataPlaneBytes, "data_plane")
	if d := st.Disk; d != nil {
		g(m.tierBytes, float64(st.ValueBytes), "memory")
		g(m.tierBytes, float64(d.Used), "disk")
		c(m.tierHits, st.Hits-min(d.Hits, st.Hits), "memory")
		c(m.tierHits, d.Hits, "disk")
		g(m.diskCapacity, float64(d.Capacity))
		c(m.promotions, d.Promotions)
		c(m.demotions, d.Demotions)
		g(m.queue, float64(d.Queue))
		c(m.diskEvictions, d.Evictions)
		c(m.ioErrors, d.ReadErrors, "read")
		c(m.ioErrors, d.WriteErrors, "write")
		c(m.corrupt, d.Corrupt)
		c(m.dropped, d.DroppedTooLarge, "too_large")
		c(m.dropped, d.DroppedWriteError, "write_error")
		c(m.dropped, d.DroppedRead, "read")
	}
	if f := m.s.fence.Load(); f != nil {
		f.mu.RLock()
		serving := f.servingLocked(time.Now())
		f.mu.RUnlock()
		g(m.serving, map[bool]float64{false: 0, true: 1}[serving])
		c(m.breaks, f.breaks.Load())
		c(m.moved, f.dropped.Load())
	}
}

// The client's operations, the op label of its metrics.
const (
	cGet = iota
	cPut
	cDelete
	numClientOps
)

var clientOpNames = [numClientOps]string{"get", "put", "delete"}

// clientMetrics are a client's Prometheus metrics (ClientOptions.Metrics),
// their children resolved once: a request adds and observes, and looks up
// labels only when it fails.
type clientMetrics struct {
	reqs   [numClientOps]prometheus.Counter
	lat    [numClientOps]prometheus.Observer
	reqVec *prometheus.CounterVec
	latVec *prometheus.HistogramVec
	errs   *prometheus.CounterVec
}

func newClientMetrics(reg prometheus.Registerer) (*clientMetrics, error) {
	m := &clientMetrics{
		reqVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_kv_client_requests_total",
			Help: "Requests this KV client made (Get and GetInto, Put and PutBuffer, Delete), by op.",
		}, []string{"op"}),
		latVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "xfer_kv_client_request_duration_seconds",
			Help:    "Latency of this KV client's requests that succeeded, from the call to its return, by op.",
			Buckets: prometheus.ExponentialBucketsRange(1e-6, 10, 24),
		}, []string{"op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xfer_kv_client_errors_total",
			Help: "This KV client's requests that failed, by op and kind (not_found, buffer_too_small, invalid, unavailable, canceled, timeout, other).",
		}, []string{"op", "kind"}),
	}
	cs := []prometheus.Collector{m.reqVec, m.latVec, m.errs}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, d := range cs[:i] {
				reg.Unregister(d)
			}
			return nil, err
		}
	}
	for i := range numClientOps {
		m.reqs[i] = m.reqVec.WithLabelValues(clientOpNames[i])
		m.lat[i] = m.latVec.WithLabelValues(clientOpNames[i])
	}
	return m, nil
}

// unregister removes the metrics from reg; nil-safe.
func (m *clientMetrics) unregister(reg prometheus.Registerer) {
	if m == nil {
		return
	}
	reg.Unregister(m.reqVec)
	reg.Unregister(m.latVec)
	reg.Unregister(m.errs)
}

// done records a request of kind op that started at start and ended with
// *err.
func (m *clientMetrics) done(op int, start time.Time, err *error) {
	m.reqs[op].Inc()
	if *err != nil {
		m.errs.WithLabelValues(clientOpNames[op], clientErrorKind(*err)).Inc()
		return
	}
	m.lat[op].Observe(time.Since(start).Seconds())
}

func clientErrorKind(err error) string {
	var small *BufferTooSmallError
	switch {
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.As(err, &small):
		return "buffer_too_small"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Source is what the collector reads of the engine when Prometheus
// scrapes: one Snapshot per scrape, taken without the Set's lock held.
type Source interface {
	Snapshot() Snapshot
}

// Snapshot is the engine's state at a scrape, for the gauges and the
// counters that are not kept on the hot path.
type Snapshot struct {
	// Transports are the engine's transports, with the device each has
	// open and its rails.
	Transports []TransportState
	// Connected names the transport of each peer with a live connection.
	Connected []string
	// Pool is the engine's default pool.
	Pool mem.PoolStats
	// Regions is the number of registered regions, the pool's included.
	Regions int
	// Directory is the engine's directory entry, when it has one (a node
	// ID in a directory).
	Directory *Registration
}

// TransportState is one transport at a scrape.
type TransportState struct {
	Name string
	// Device is the device it has open (rdma's), "" for the others.
	Device string
	// Rails are the devices of a transport over several.
	Rails []transport.RailStatus
}

// Registration is the state of the engine's directory entry.
type Registration struct {
	// State is the state it is in, one of States, the states an entry
	// can be in (each a series: 1 for State, 0 for the others).
	State  string
	States []string
	// Reregistrations counts how often it was lost and registered again.
	Reregistrations uint64
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

// Describe implements prometheus.Collector for the series read at scrape
// time.
func (m *Set) Describe(ch chan<- *prometheus.Desc) {
	d := &m.descs
	ch <- d.ops
	ch <- d.sent
	ch <- d.received
	ch <- d.served
	ch <- d.servedBytes
	ch <- d.peers
	ch <- d.poolUsed
	ch <- d.poolFree
	ch <- d.poolCap
	ch <- d.poolFrag
	ch <- d.regs
	ch <- d.dirState
	ch <- d.railUp
	ch <- d.railDown
	ch <- d.railRepeated
	ch <- d.dirRereg
}

// Collect implements prometheus.Collector: the connections' counters,
// live and gone, summed, and the engine's Snapshot (connected peers, the
// pool, the region table, the directory entry, the rails), read when
// Prometheus scrapes, not kept up to date on the hot path.
func (m *Set) Collect(ch chan<- prometheus.Metric) {
	d := &m.descs
	m.mu.Lock()
	sums := make(map[string]*totals, len(m.retired))
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
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for name, t := range sums {
		for i := range NumOps {
			counter(d.ops, t.ops[i], opNames[i], name)
		}
		counter(d.sent, t.sent, name)
		counter(d.received, t.received, name)
		for i, op := range []string{"write", "read"} {
			counter(d.served, t.served[i], op, name)
			counter(d.servedBytes, t.servedBytes[i], op, name)
		}
	}
	s := m.src.Snapshot()
	type key struct{ transport, device string }
	counts := map[key]int{}
	device := map[string]string{}
	for _, t := range s.Transports {
		for _, r := range t.Rails {
			up := 0.0
			if r.Up {
				up = 1
			}
			gauge(d.railUp, up, t.Name, r.Device)
			counter(d.railDown, r.Down, t.Name, r.Device)
			counter(d.railRepeated, r.Repeated, t.Name, r.Device)
		}
		device[t.Name] = t.Device
		counts[key{t.Name, t.Device}] = 0
	}
	for _, name := range s.Connected {
		counts[key{name, device[name]}]++
	}
	for k, n := range counts {
		gauge(d.peers, float64(n), k.transport, k.device)
	}
	gauge(d.poolUsed, float64(s.Pool.InUse))
	gauge(d.poolFree, float64(s.Pool.Free))
	gauge(d.poolCap, float64(s.Pool.Capacity))
	gauge(d.poolFrag, s.Pool.Fragmentation)
	gauge(d.regs, float64(s.Regions))
	if r := s.Directory; r != nil {
		for _, st := range r.States {
			v := 0.0
			if r.State == st {
				v = 1
			}
			gauge(d.dirState, v, st)
		}
		counter(d.dirRereg, r.Reregistrations)
	}
}

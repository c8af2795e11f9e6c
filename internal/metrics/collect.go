package metrics

import "github.com/prometheus/client_golang/prometheus"

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

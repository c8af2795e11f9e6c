package master

import "github.com/prometheus/client_golang/prometheus"

// collector exposes a Service's Stats to Prometheus when it scrapes.
type collector struct {
	s *Service

	objects, used, capacity, segments, clients                 *prometheus.Desc
	evictions, evictedBytes, leaseRefusals, putStarts, putEnds *prometheus.Desc
	noRoom, gets, getHits, deadClients, authFailures           *prometheus.Desc
	leader                                                     *prometheus.Desc
}

// Collector returns a prometheus.Collector of the Service's Stats, named
// xfer_mooncake_master_*.
func (s *Service) Collector() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("xfer_mooncake_master_"+name, help, nil, nil)
	}
	return &collector{
		s:             s,
		objects:       d("objects", "Keys the master knows, committed or being put."),
		used:          d("pool_used_bytes", "Bytes of the mounted segments that places hold."),
		capacity:      d("pool_capacity_bytes", "Bytes of the mounted segments."),
		segments:      d("segments", "Segments mounted."),
		clients:       d("clients", "Clients alive (heard from within the client TTL, or not swept yet)."),
		evictions:     d("evictions_total", "Objects evicted to make room."),
		evictedBytes:  d("evicted_bytes_total", "Bytes of the replicas of the objects evicted."),
		leaseRefusals: d("lease_refusals_total", "Removals refused because a read lease lasted."),
		putStarts:     d("put_starts_total", "PutStarts that reserved places."),
		putEnds:       d("put_ends_total", "Puts committed."),
		noRoom:        d("no_room_total", "PutStarts refused because no segment had room (NO_AVAILABLE_HANDLE)."),
		gets:          d("gets_total", "Keys GetReplicaList was asked for."),
		getHits:       d("get_hits_total", "Keys GetReplicaList found committed."),
		deadClients:   d("dead_clients_total", "Clients declared dead (no ping within the client TTL)."),
		authFailures:  d("auth_failures_total", "Calls refused for want of a valid proof of the shared secret."),
		leader:        d("leader", "1 while the master serves: always alone; among masters that elect a leader in etcd, while it leads (0: a standby)."),
	}
}

func (m *collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{m.objects, m.used, m.capacity, m.segments, m.clients,
		m.evictions, m.evictedBytes, m.leaseRefusals, m.putStarts, m.putEnds, m.noRoom, m.gets, m.getHits, m.deadClients, m.authFailures, m.leader}
}

// Describe implements prometheus.Collector.
func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *collector) Collect(ch chan<- prometheus.Metric) {
	st := m.s.Stats()
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	c := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(m.objects, float64(st.Objects))
	g(m.used, float64(st.UsedBytes))
	g(m.capacity, float64(st.Capacity))
	g(m.segments, float64(st.Segments))
	g(m.clients, float64(st.Clients))
	c(m.evictions, st.Evictions)
	c(m.evictedBytes, st.EvictedBytes)
	c(m.leaseRefusals, st.LeaseRefusals)
	c(m.putStarts, st.PutStarts)
	c(m.putEnds, st.PutEnds)
	c(m.noRoom, st.NoRoom)
	c(m.gets, st.Gets)
	c(m.getHits, st.GetHits)
	c(m.deadClients, st.DeadClients)
	c(m.authFailures, st.AuthFailures)
	leader := 0.0
	if st.Leading {
		leader = 1
	}
	g(m.leader, leader)
}

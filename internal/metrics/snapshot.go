package metrics

import (
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

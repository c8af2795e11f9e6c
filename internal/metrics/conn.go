package metrics

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/transport"
)

// Conn are one connection's (one endpoint's) counters. An endpoint that
// counts its own operations (transport.Counter: tcp's and shm's, under
// the lock or atomic each operation takes there anyway) is read when
// Prometheus scrapes, and the hot path adds nothing for its operations
// but the latency samples; Ops, Sent and Received then hold only what
// never reached the endpoint (operations that failed before it was posted
// to) and the messages received. For the others (rdma) the hot path adds
// to them with atomics: no label lookup, no allocation, no float CAS.
type Conn struct {
	transport string
	lat       *[NumOps]prometheus.Observer // the transport's latency histograms
	counter   transport.Counter            // the endpoint, when it counts its own operations
	every     uint8                        // one operation in every is timed (SampleEvery)

	Ops      [NumOps]atomic.Uint64
	Sent     atomic.Uint64
	Received atomic.Uint64
	// Served and ServedBytes count the peers' one-sided writes ([0]) and
	// reads ([1]) this engine served.
	Served      [2]atomic.Uint64
	ServedBytes [2]atomic.Uint64
}

// Every is how often an operation on the connection is timed: one in
// Every.
func (c *Conn) Every() uint8 { return c.every }

// CountsOwn reports whether the endpoint counts its own operations and
// bytes (transport.Counter), which the Conn then leaves to it.
func (c *Conn) CountsOwn() bool { return c.counter != nil }

// Posted counts an operation posted to the endpoint, unless the endpoint
// counts its own.
func (c *Conn) Posted(op Op) {
	if c.counter == nil {
		c.Ops[op].Add(1)
	}
}

// Observe records the latency of an operation of kind op started at
// start (one operation in Every is timed).
func (c *Conn) Observe(op Op, start time.Time) {
	c.lat[op].Observe(time.Since(start).Seconds())
}

// Moved counts the bytes of a successful operation of kind op posted on
// the connection, unless the endpoint counts its own: received for a
// read, sent for the others.
func (c *Conn) Moved(op Op, n int) {
	if c.counter != nil {
		return
	}
	if op == Read {
		c.Received.Add(uint64(n))
	} else {
		c.Sent.Add(uint64(n))
	}
}

// Delivered counts a message of n bytes received on the connection.
func (c *Conn) Delivered(n int) {
	c.Ops[Recv].Add(1)
	c.Received.Add(uint64(n))
}

// Totals are the connection's operations, served ones included, and their
// bytes both ways, for the status API.
func (c *Conn) Totals() (ops, bytes uint64) {
	var t totals
	t.add(c)
	for _, n := range t.ops {
		ops += n
	}
	ops += t.served[0] + t.served[1]
	bytes = t.sent + t.received + t.servedBytes[0] + t.servedBytes[1]
	return ops, bytes
}

// totals are the counters of connections summed: those gone, and at
// scrape time the live ones' too.
type totals struct {
	ops                 [NumOps]uint64
	sent, received      uint64
	served, servedBytes [2]uint64
}

func (t *totals) add(c *Conn) {
	for i := range t.ops {
		t.ops[i] += c.Ops[i].Load()
	}
	t.sent += c.Sent.Load()
	t.received += c.Received.Load()
	if c.counter != nil {
		n := c.counter.Counts()
		for k, v := range n.Ops {
			if k != 0 {
				t.ops[OpOf(transport.OpKind(k))] += v
			}
		}
		t.sent += n.Sent
		t.received += n.Received
	}
	for i := range 2 {
		t.served[i] += c.Served[i].Load()
		t.servedBytes[i] += c.ServedBytes[i].Load()
	}
}

// LatencyEvery is how often an operation is timed for the latency
// histograms: one in LatencyEvery. Reading the clock twice and observing
// costs about 110 ns here (less on a quiet machine, more under load); one
// in 16 spreads it to a few ns, nothing beside an operation of
// microseconds (tcp, rdma), while a steady stream still yields plenty of
// samples. A synchronous Write or Read counts down to its next sample in
// its pooled call; a Batch and a Recv draw from the runtime's per-thread
// generator (SampleStart). Neither is an atomic shared between cores.
const LatencyEvery = 16

// latencyEveryCopy is LatencyEvery on a transport that maps the peer's
// memory (shm), where a small operation is a copy of about 100 ns, less
// than the clock's two reads: one in 16 would still cost about 10% of it,
// one in 128 about 1%.
const latencyEveryCopy = 128

// SampleEvery is LatencyEvery for a transport with caps c.
func SampleEvery(c transport.Caps) uint8 {
	if c.MapsMemory {
		return latencyEveryCopy
	}
	return LatencyEvery
}

// SampleStart returns the time to measure an operation from when it is
// one of those timed for the latency histograms (one in every, at
// random, from math/rand/v2's per-thread generator), else the zero time.
func SampleStart(every uint8) time.Time {
	if rand.Uint32()%uint32(every) == 0 {
		return time.Now()
	}
	return time.Time{}
}

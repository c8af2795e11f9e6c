// Package watchdog finds peers that stopped making progress. [Run] looks at
// every peer eight times per timeout. A peer that has had operations
// outstanding on its connection and moved nothing for the timeout is
// stalled: the watchdog tells it ([Peer.Stalled]) and its owner closes the
// connection, so that every operation on it reaches an end state. A quiet
// peer with nothing outstanding but goroutines waiting for it to send is
// no failure if it is alive, so after half the timeout the watchdog asks
// it for a probe ([Peer.Probe]), something it must answer: the answer is
// progress, and an outstanding probe counts as an outstanding operation.
//
// The package knows peers only through [Peer] and their connections
// through [Conn] (transport.Progresser's method); what a probe is, how a
// stall is reported and how a connection is closed are the engine's.
//
// # Threading and lifetimes
//
// Run is one goroutine; it alone calls the methods of the peers it is given
// and keeps what it remembers of each (the connection it last saw, its
// progress count and since when), which it forgets once a peer is no
// longer listed. Those methods must not block: a probe or a close that
// may wait runs in a goroutine of the engine's. Run returns when its
// context ends.
package watchdog

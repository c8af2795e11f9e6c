// Package admit bounds the connections that a listener holds before they
// authenticate: a Gate admits each accepted connection as pending, and
// when it is full the oldest pending connection gives way to the new one.
//
// A listener that waits for one peer (the transfer tool's producer) or
// serves authenticated peers (the engine's handshake, hence the pages
// server and the connector's engines) cannot tell a slow peer from a
// stray (a port scanner, a slow-loris, a host without the secret) before
// the handshake ends. Refusing new connections while the pending ones sit
// out their handshake timeout would let one host that holds the sockets
// open lock everyone out; admitting them all would let it exhaust the
// process's file descriptors. A Gate keeps the newest: a real peer
// authenticates within a round trip or two, a stray never does, so under
// a flood strays evict each other while real peers get through (and a
// peer evicted anyway redials).
//
// Two bounds, both counted per Gate:
//
//   - Max: the connections pending at once. Admitting one more evicts the
//     oldest pending.
//   - PerSource: the connections pending at once from one source address
//     (the remote host, its port dropped). Admitting one more from a
//     source at its cap evicts that source's oldest, so that one host
//     evicts its own connections and not those of others.
//
// With Grace (and TryAdmit), a connection pending for less than Grace is
// not evicted: the newcomer that would evict it is refused instead. A peer
// whose handshake needs a message after the listener spoke first (a hello
// sent to every connection, answered by a ready) cannot be told from a
// stray by anything it sends before that answer; Grace gives it the time
// to answer.
//
// An evicted connection's deadline is set in the past: the goroutine that
// runs its handshake fails at once, sees that it was evicted
// (Ticket.Evicted, Ticket.Leave), counts it as such and closes it. A
// connection whose handshake had just succeeded when it was evicted may
// stay: the eviction made room all the same, and the peer, which saw its
// handshake end, is not dropped after the fact.
//
// Threading: a Gate is safe for concurrent use; a Ticket belongs to the
// goroutine that runs its connection's handshake. Lifetimes: nothing
// needs closing; a Ticket must Leave once its handshake ends either way.
package admit

// Package twin is an in-memory transport: the twin of tcp, shm and rdma
// for testing the layers above the transport contract (the engine, the
// services) without a wire, in the spirit of wireguard-go's conn/bindtest.
//
// Both endpoints of a connection live in one process. They find each other
// through the handshake: LocalBlob names the process, Usable refuses a peer
// in another one (ErrNotSupported), and the dialer's Connect sends a random
// token over the handshaken connection that the acceptor's Connect reads
// and looks up. From then on the connection is only kept open (and closed
// with the endpoint): an endpoint moves bytes by copying through its peer's
// transport.Host, exactly as a target serves a remote access: WRITE and
// READ Resolve the peer's memory (checking region, key, rights and bounds),
// copy, and Release; a write-with-notify then calls Notify; a SEND calls
// Deliver, lending the sender's own buffer for the call. SENDs take
// receive credits like the other transports: at most Params.RecvDepth
// messages are delivered and not yet Consumed; later ones wait, in order.
//
// Nothing of the peer is cached, so Revoke has nothing to drop: every
// access goes through the peer's Host, which refuses a deregistered
// region at once.
//
// Threading: each endpoint runs its operations, in posting order, on one
// goroutine of its own, from which its Completers run and its peer's Host
// is called (the peer's receive path, where message handlers run). Post,
// Cancel, Consumed and Revoke may be called from any goroutine.
//
// Lifetimes: Close fails the operations not yet started with an error
// matching net.ErrClosed, waits for the one running, takes the peer's
// endpoint down too (its operations fail with an error matching
// ErrPeerLost), and once it returns neither endpoint calls into this
// side's Host again.
//
// The twin is for tests: it is never the only test of a feature. It does
// not implement transport.Appender.
package twin

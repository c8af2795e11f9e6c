// Package tcp is xfer's TCP transport: every operation travels as frames
// over the peer's TCP connections, through the control stream of package
// transport/stream, which also serves the peer's one-sided requests against
// the local engine (see that package for the protocol, its threading and
// the write-by-reference path of memfd-backed regions).
//
// An Endpoint holds its stream as a field and forwards the transport
// contract to it; it implements transport.Appender. Its lifetime is the
// stream's: Close closes the stream and waits for its goroutines.
//
// Config is the engine's tcp section. Its congestion control policy
// (Config.Congestion; congestion.go) applies to sockets before they
// connect, so the engine, which dials and accepts every connection for
// its handshake, applies it with DialControl, ListenControl and Accepted.
package tcp

// Package tcp is xfer's TCP transport: every operation travels as frames
// over the peer's TCP connections, through the control stream of package
// transport/stream, which also serves the peer's one-sided requests against
// the local engine (see that package for the protocol, its threading and
// the write-by-reference path of memfd-backed regions).
//
// An Endpoint holds its stream as a field and forwards the transport
// contract to it; it implements transport.Appender. Its lifetime is the
// stream's: Close closes the stream and waits for its goroutines.
package tcp

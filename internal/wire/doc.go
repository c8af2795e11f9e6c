// Package wire defines xfer's on-wire formats: the handshake messages that
// open every peer connection, the fixed-size frame header of the stream
// transports (tcp, shm control), and the serialized region descriptor.
//
// Everything here is plain encoding and decoding over byte slices, using the
// standard library only. Every decoder checks every length against the input
// and against explicit limits before it allocates, returns an error wrapping
// ErrMalformed for any input it does not accept, and never panics: each has a
// fuzz target.
//
// All integers are little-endian.
package wire

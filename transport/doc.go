// Package transport defines the contract between the xfer engine and the
// transports that move its bytes: tcp, shm and rdma (verbs).
//
// The engine performs the handshake on a TCP connection, picks a transport,
// and hands the connection to Transport.Connect, which returns an Endpoint.
// Endpoints are batch-first: Post takes many operations and completion is
// reported per operation through the Completer each Op carries.
//
// Every transport must pass two conformance suites, run from its own
// package's tests: package transport/transporttest checks this contract
// alone, endpoint against endpoint, and package xfertest the whole engine
// over the transport. Package transport/twin is an in-memory transport
// that passes the first, for testing the layers above without a wire.
//
// Threading: Post, Cancel, Consumed and Revoke may be called from many
// goroutines at once. Completers are called from the endpoint's goroutines
// and must not block or call Post.
//
// Lifetimes: an Endpoint owns the connection it was given. Close fails all
// outstanding operations with an error matching net.ErrClosed, releases
// every resource and waits for the endpoint's goroutines.
package transport

// Package batch tracks the completion of the engine's operations: a
// Batch's (its operations posted together, waited for together, repeated
// on a new connection when theirs is lost, and held when a Wait gives up
// on them) and a synchronous Call's (one operation, pooled, whose caller
// may abandon it).
//
// It knows the peer an operation goes to only through [Peer], which the
// engine implements: its connection, its registered memory, its metrics
// and its failover policy stay the engine's.
//
// # Threading and lifetimes
//
// A Batch's OpDone is called by transports, once per operation, from any
// goroutine; Wait by any number of goroutines; Reset and Post by one
// submitter, only while no operation of the batch is running. A Call
// belongs to its caller from GetCall until it is done, or, once
// abandoned, to the transport until OpDone returns it to the pool.
package batch

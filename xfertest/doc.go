// Package xfertest is the conformance suite every xfer transport must pass,
// and helpers for tests that need engines.
//
// A transport's package runs the suite from its tests:
//
//	func TestConformance(t *testing.T) { xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyTCP}) }
//
// The suite starts real engines in this process, connected over real
// loopback TCP (and whatever the transport adds), and checks the contract
// of the public API: data integrity of every operation, notification
// ordering, message order and flow control, per-operation batch errors,
// refusal of bad remote accesses with target memory unchanged, cancellation,
// authentication, and close semantics.
//
// Threading and lifetimes: Run runs its subtests one after another; the
// engines of a subtest use as many goroutines as their transports do. Every
// engine and buffer a helper returns belongs to the calling test and is
// closed by t.Cleanup, so a test that ends leaves nothing behind (which the
// transports' TestMain, internal/testmain, checks).
package xfertest

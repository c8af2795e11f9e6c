// Package testmain is the TestMain of xfer's test binaries: it runs the
// tests, then fails the binary when they left something behind. It is
// cilium/ebpf's testmain, for this module.
//
// Every package whose tests open connections, memory, files or devices
// calls it:
//
//	func TestMain(m *testing.M) { testmain.Run(m) }
//
// After a successful run it checks, in this order:
//
//   - goroutines: none may be left but the test binary's own (goleak, which
//     waits a moment for goroutines that are on their way out);
//   - file descriptors: every descriptor in /proc/self/fd that was not
//     open before the tests (sockets, pipes, memfds, eventfds, pidfds,
//     device files) must be closed again; a leak is listed with what the
//     descriptor refers to. The check waits up to [FDGrace] for descriptors
//     that a goroutine is closing. Where /proc/self/fd does not exist (off
//     Linux) this check is skipped;
//   - each check the package adds with [Check], such as internal/ibv's
//     count of live verbs objects, which every binary that uses RDMA adds
//     with internal/testmain/rdmaleak.
//
// A failed test run is reported as it is: its leaks are not checked, since
// a test that fails half way may leave anything behind.
//
// # Exceptions
//
// A package that legitimately keeps a descriptor open across its tests
// (a process-wide cache opened on first use) names it with [IgnoreFD] and
// says why; there are none today. Options are plain values: the package
// keeps no state between runs, and Run is called once per test binary,
// from TestMain's goroutine.
package testmain

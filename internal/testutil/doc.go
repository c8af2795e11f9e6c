// Package testutil holds the test helpers that several xfer packages share.
//
// Its main concern is deciding whether a test that needs real RDMA verbs
// runs, is skipped, or fails. RequireVerbs skips such a test on a machine without
// RDMA, so that `go test ./...` passes anywhere, but when XFER_REQUIRE_VERBS=1
// (set by `make verbs-test`, which runs the tests inside tools/rdma-vm) it
// fails the test instead: a missing device there is a regression, not an
// environment to tolerate. This is the "one skip helper that refuses to hide
// regressions" of cilium/ebpf's internal/testutils.
//
// RequireCUDA and PrometheusProgram do the same for a GPU and for Debian's
// prometheus package. For the packages with GPU tests, RunWithCUDA is their
// TestMain: without the NVIDIA driver the tests run against a stand-in
// driver (UseFakeCUDA), and CUDADriverFDs exempts the driver's own
// descriptors from internal/testmain's leak check. StartProcess starts a
// daemon for a test (an xfer binary, a child test process) and stops it
// when the test ends.
//
// The package is plain Go (no cgo): it looks only at the environment and at
// /sys/class/infiniband. It is safe for concurrent use; its one state, set
// by UseFakeCUDA from TestMain before any test, is whether the stand-in
// driver is in use.
package testutil

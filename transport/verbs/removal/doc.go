// Package removal holds the test of an RDMA device removed while engines use
// it (`rdma link delete`): operations in flight fail, the kernel finishes the
// removal, and peers under the auto policy carry on over another transport.
//
// It is a package of its own so that its test binary runs in a VM of its own
// (make verbs-test boots one per package): it deletes the device, and no
// other test in the process may hold a handle on it that would keep the
// removal waiting.
package removal

// Package rails holds the test of an engine over two RDMA devices (rails):
// a second software device is added on a dummy netdev, two engines connect
// over both, traffic spreads over both, one rail's device is deleted
// (`rdma link delete`) under a READ and WRITE load without an error or a
// wrong byte, and the device is added again and the same connection
// takes it back; and two engines that list their devices in opposite
// orders connect over both.
//
// It is a package of its own so that its test binary runs in a VM of its
// own (make verbs-test boots one per package): it adds and deletes
// devices, and no other test in the process may hold a handle on them.
package rails

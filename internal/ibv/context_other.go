//go:build !cgo || !linux

package ibv

// Context is an opened RDMA device; this build has none.
type Context struct{ _ [0]func() }

// Devices reports that this build cannot use verbs.
func Devices() ([]DeviceInfo, error) { return nil, errUnsupported("list RDMA devices") }

// DeviceNames reports that this build cannot use verbs.
func DeviceNames() ([]string, error) { return nil, errUnsupported("list RDMA devices") }

// Open reports that this build cannot use verbs.
func Open(name string) (*Context, error) { return nil, errUnsupported("open RDMA device " + name) }

// Name returns "".
func (c *Context) Name() string { return "" }

// Transport returns "".
func (c *Context) Transport() string { return "" }

// QueryDevice reports that this build cannot use verbs.
func (c *Context) QueryDevice() (DeviceInfo, error) {
	return DeviceInfo{}, errUnsupported("ibv_query_device")
}

// QueryPort reports that this build cannot use verbs.
func (c *Context) QueryPort(port int) (PortInfo, error) {
	return PortInfo{}, errUnsupported("ibv_query_port")
}

// QueryGID reports that this build cannot use verbs.
func (c *Context) QueryGID(port, index int) ([16]byte, error) {
	return [16]byte{}, errUnsupported("ibv_query_gid")
}

// Close does nothing.
func (c *Context) Close() error { return nil }

// PortIsInfiniBand returns false.
func (c *Context) PortIsInfiniBand(port int) bool { return false }

// KernelIndex returns -1.
func (c *Context) KernelIndex() int { return -1 }

package rdmacm

// Addr is what the kernel says about a bound or resolved ID.
type Addr struct {
	NodeGUID string // of the device, formatted as DeviceInfo.NodeGUID
	// DeviceIndex is the kernel's index of the device, or -1 when the
	// kernel does not say (before Linux 5.8).
	DeviceIndex int
	Port        int    // the device's port
	SrcPort     uint16 // the local port of the address
}

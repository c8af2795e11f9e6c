package transport

// Devices describes the devices a transport has open, for status and
// metrics (Transport.Devices): the zero Devices for a transport that
// opens none (tcp, shm).
type Devices struct {
	// InUse is the device the transport has open; nil before it was first
	// used, after its device was removed, and for a transport without
	// devices.
	InUse *DeviceInUse
	// Rails describes each device (rail) of a transport over several
	// (rdma's, with rdma.devices), in order; nil for one over one device.
	Rails []RailStatus
}

// DeviceInUse describes the device, port and GID a transport has open (an
// rdma device).
type DeviceInUse struct {
	Device   string `json:"device"` // "mlx5_0", "rxe0"
	Port     int    `json:"port"`
	GIDIndex int    `json:"gid_index"`
	GIDType  string `json:"gid_type"`   // "RoCE v2", "IB", ...
	MTU      int    `json:"active_mtu"` // bytes
	// GPUMemory is how the device last registered a GPU region: as a
	// DMA-BUF, by address (nvidia-peermem), or none; empty before any.
	GPUMemory string `json:"gpu_memory,omitempty"`
	// Grants is what makes the NIC enforce a grant (a sub-range of a
	// region with its own rights): "registration" (the grant's own MR),
	// with why memory windows are not used.
	Grants string `json:"grants,omitempty"`
}

// RailStatus describes one device (rail) of a transport over several.
type RailStatus struct {
	Device string `json:"device"`
	// Up: the device is open and usable. A rail that failed is down until
	// the transport's probe finds its device back.
	Up bool `json:"up"`
	// Down counts the times the rail was taken down under a live
	// connection; Repeated counts the operations in flight on it then that
	// were repeated on another rail.
	Down     uint64 `json:"down"`
	Repeated uint64 `json:"repeated"`
	// Ops counts the READs and WRITEs (or pieces of them, when one was
	// cut over the rails) completed on the rail.
	Ops uint64 `json:"ops"`
	// NUMANode is the NUMA node of the rail's device (sysfs numa_node);
	// -1 where the host or device says none.
	NUMANode int `json:"numa_node"`
}

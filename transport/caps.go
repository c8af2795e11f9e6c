package transport

import (
	"fmt"
	"log/slog"

	"github.com/xferio/xfer/mem"
)

// Caps are what a transport can do. Each transport states its own
// (Transport.Caps, and a variable of its package that the engine's
// transport table reads before any transport is built), and the engine
// acts on them: which peers a transport can reach, how many connections
// it spreads over, which memory it moves itself, and who keeps a peer to
// a region's rights.
type Caps struct {
	// SameHost is set for a transport that connects peers on one host
	// only (shm).
	SameHost bool `json:"same_host"`
	// Streams is set for a transport that spreads a peer's operations
	// over several TCP connections (Params.Conns, the tcp section's
	// conns); the others get one connection, for control.
	Streams bool `json:"streams"`
	// MapsMemory is set for a transport that maps the peer's regions into
	// this process (shm): it needs every region backed by a memfd that it
	// can pass to the peer.
	MapsMemory bool `json:"maps_memory"`
	// Memory is the kinds of memory the transport moves itself. The
	// engine stages the other kinds through host memory where it can
	// (GPU memory over tcp), and refuses an operation it cannot stage.
	Memory mem.Kinds `json:"memory"`
	// Rights says who keeps a peer to a region's access rights.
	Rights Rights `json:"rights"`
}

// OwnerServes reports whether the owner's engine serves every one-sided
// access itself (RightsByOwner: a stream transport, where a WRITE's bytes
// pass through both engines), rather than the peer reaching the region by
// a mapping (one copy) or by the NIC's DMA.
func (c Caps) OwnerServes() bool { return c.Rights == RightsByOwner }

// Rights says what keeps a peer from touching a region beyond the rights
// it grants (read-only, say).
type Rights uint8

const (
	// RightsByPeer: only the peer's own engine keeps to the rights; a
	// hostile peer need not. The transport exposes the whole region.
	RightsByPeer Rights = iota
	// RightsByOwner: the owner's engine checks every access before it
	// touches a byte (stream transports: the owner serves each access).
	RightsByOwner
	// RightsByKernel: the kernel does; the peer's mapping grants no more
	// than the region's rights.
	RightsByKernel
	// RightsByNIC: the NIC does; the memory registration grants no more
	// than the region's rights.
	RightsByNIC
)

// String is "peer", "owner", "kernel" or "nic".
func (r Rights) String() string {
	switch r {
	case RightsByPeer:
		return "peer"
	case RightsByOwner:
		return "owner"
	case RightsByKernel:
		return "kernel"
	case RightsByNIC:
		return "nic"
	}
	return "unknown"
}

// MarshalText implements encoding.TextMarshaler (String).
func (r Rights) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: a name String gives.
func (r *Rights) UnmarshalText(text []byte) error {
	for v := RightsByPeer; v <= RightsByNIC; v++ {
		if v.String() == string(text) {
			*r = v
			return nil
		}
	}
	return fmt.Errorf("rights %q: want peer, owner, kernel or nic", text)
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

// DeviceUser is implemented by a transport that opens a device (rdma's).
// Status and metrics describe the transport through it.
type DeviceUser interface {
	// InUse reports the device the transport has open, without opening
	// one: false before the transport was first used, and after its device
	// was removed.
	InUse() (DeviceInUse, bool)
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

// RailUser is implemented by a transport over several devices (rdma's,
// with rdma.devices). Status and metrics describe its rails through it.
type RailUser interface {
	// Rails describes each rail, in order; nil for a transport over one
	// device.
	Rails() []RailStatus
}

// LogSetter is implemented by a transport that logs on its own, outside
// any endpoint (rdma's, once per way it registers GPU memory). The engine
// hands it its logger when it opens.
type LogSetter interface {
	SetLogger(l *slog.Logger)
}

package ibv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DeviceInfo describes an RDMA device: what ibv_query_device reports, plus
// node and transport type and its ports.
type DeviceInfo struct {
	Name         string
	NodeGUID     string // "0002:c903:0086:a100", as ibv_devinfo prints it
	SysImageGUID string
	NodeType     string // "CA", "RNIC", "switch", "router", "usNIC", ...
	Transport    string // "InfiniBand" (also RoCE), "iWARP", "usNIC", ...

	FWVer        string
	VendorID     uint32
	VendorPartID uint32
	HWVer        uint32

	MaxQP       int
	MaxQPWR     int
	MaxSGE      int
	MaxCQ       int
	MaxCQE      int
	MaxMR       int
	MaxMRSize   uint64
	MaxQPRdAtom int // max outstanding RDMA READs a QP can be the target of
	// MaxQPInitRdAtom is the max outstanding RDMA READs a QP can initiate.
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	MaxPD           int
	// MemWindows: the device binds type 2 memory windows
	// (IBV_DEVICE_MEM_WINDOW_TYPE_2A or _2B in device_cap_flags).
	MemWindows bool

	Ports []PortInfo
}

// IWARP reports whether the device speaks iWARP, whose QPs are connected
// through rdma_cm ([CMID]) only, never by hand with ToRTR.
func (d *DeviceInfo) IWARP() bool { return d.Transport == "iWARP" }

// PortInfo describes a port of a device (ibv_query_port plus sysfs).
type PortInfo struct {
	Num       int
	State     string // "ACTIVE", "DOWN", "INIT", "ARMED", "NOP", "ACTIVE_DEFER"
	PhysState string // "LinkUp", "Disabled", "Polling", ... ("" if unknown)
	LinkLayer string // "InfiniBand" or "Ethernet"
	MaxMTU    int    // bytes: 256..4096
	ActiveMTU int    // bytes: 256..4096
	LID       uint16
	SMLID     uint16
	Rate      string // "10 Gb/sec (4X SDR)", as in sysfs; "" if unknown
	// MaxMsgSize is the largest message the port carries (max_msg_sz):
	// the most one work request may move.
	MaxMsgSize uint32

	GIDTableLen int
	GIDs        []GIDInfo // only the non-zero entries
}

// Active reports whether the port can carry traffic.
func (p *PortInfo) Active() bool { return p.State == "ACTIVE" }

// GIDInfo is one entry of a port's GID table.
type GIDInfo struct {
	Index      int
	GID        [16]byte
	Type       string // "IB", "RoCE v1", "RoCE v2", "iWARP" ("" if the kernel does not say)
	Netdev     string // the network device behind a RoCE GID ("" for IB)
	IPv4Mapped bool   // ::ffff:a.b.c.d, the GID of an IPv4 address
	LinkLocal  bool   // fe80::/10
}

// String formats the GID as show_gids does: eight groups of four hex
// digits, fe80:0000:0000:0000:0000:00ff:fe00:0001.
func (g GIDInfo) String() string { return gidString(g.GID) }

func gidString(gid [16]byte) string {
	var b strings.Builder
	b.Grow(39)
	const hex = "0123456789abcdef"
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		for _, c := range gid[i : i+2] {
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// newGIDInfo decodes entry index of a GID table whose type is typ (as
// gidType names it). Only IB and RoCE GIDs are IPv6 addresses: an iWARP
// device's GID is its netdev's MAC address in the first six bytes, so it is
// neither IPv4-mapped nor link-local, whatever those bytes are. (A random MAC
// such as a dummy netdev's begins fe:80..fe:bf once in 256.)
func newGIDInfo(index int, gid [16]byte, typ string) GIDInfo {
	g := GIDInfo{Index: index, GID: gid, Type: typ}
	if typ == "iWARP" {
		return g
	}
	g.IPv4Mapped = gid == [16]byte{10: 0xff, 11: 0xff, 12: gid[12], 13: gid[13], 14: gid[14], 15: gid[15]}
	g.LinkLocal = gid[0] == 0xfe && gid[1]&0xc0 == 0x80
	return g
}

// mtuBytes converts an enum ibv_mtu to bytes (0 if unknown).
func mtuBytes(m int) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// mtuEnum converts a path MTU in bytes to an enum ibv_mtu.
func mtuEnum(bytes int) (int, error) {
	for m := 1; m <= 5; m++ {
		if 128<<m == bytes {
			return m, nil
		}
	}
	return 0, fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", bytes)
}

func portStateString(s int) string {
	switch s {
	case 0:
		return "NOP"
	case 1:
		return "DOWN"
	case 2:
		return "INIT"
	case 3:
		return "ARMED"
	case 4:
		return "ACTIVE"
	case 5:
		return "ACTIVE_DEFER"
	}
	return "state " + strconv.Itoa(s)
}

func physStateString(s int) string {
	switch s {
	case 1:
		return "Sleep"
	case 2:
		return "Polling"
	case 3:
		return "Disabled"
	case 4:
		return "PortConfigurationTraining"
	case 5:
		return "LinkUp"
	case 6:
		return "LinkErrorRecovery"
	case 7:
		return "PhyTest"
	}
	return ""
}

func linkLayerString(l int, transport string) string {
	switch l {
	case 1:
		return "InfiniBand"
	case 2:
		return "Ethernet"
	}
	// IBV_LINK_LAYER_UNSPECIFIED: old kernels and iWARP; both sit on IB or
	// Ethernet by transport.
	if transport == "InfiniBand" {
		return "InfiniBand"
	}
	return "Ethernet"
}

func nodeTypeString(t int) string {
	switch t {
	case 1:
		return "CA"
	case 2:
		return "switch"
	case 3:
		return "router"
	case 4:
		return "RNIC"
	case 5:
		return "usNIC"
	case 6:
		return "usNIC UDP"
	}
	return "unknown"
}

func transportString(t int) string {
	switch t {
	case 0:
		return "InfiniBand"
	case 1:
		return "iWARP"
	case 2:
		return "usNIC"
	case 3:
		return "usNIC UDP"
	}
	return "unknown"
}

// rateString computes a port's rate from the IB width and speed codes, in
// the format of /sys/class/infiniband/<dev>/ports/<n>/rate.
func rateString(width, speed int) string {
	lanes := map[int]int{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	type sp struct {
		gbps float64
		name string
	}
	s, ok := map[int]sp{
		1: {2.5, "SDR"}, 2: {5, "DDR"}, 4: {10, "QDR"}, 8: {10, "FDR10"},
		16: {14, "FDR"}, 32: {25, "EDR"}, 64: {50, "HDR"}, 128: {100, "NDR"},
	}[speed]
	if lanes == 0 || !ok {
		return ""
	}
	return fmt.Sprintf("%s Gb/sec (%dX %s)", strconv.FormatFloat(s.gbps*float64(lanes), 'f', -1, 64), lanes, s.name)
}

// gidType names a GID type as show_gids does, from the sysfs
// gid_attrs/types entry ("IB/RoCE v1" or "RoCE v2"). The kernel calls the
// GIDs of iWARP devices "IB/RoCE v1" too; they are neither.
func gidType(sysfs, linkLayer, transport string) string {
	if transport == "iWARP" {
		return "iWARP"
	}
	switch strings.TrimSpace(sysfs) {
	case "":
		if linkLayer == "InfiniBand" {
			return "IB"
		}
		return ""
	case "IB/RoCE v1":
		if linkLayer == "InfiniBand" {
			return "IB"
		}
		return "RoCE v1"
	default:
		return strings.TrimSpace(sysfs)
	}
}

// readSysfs returns the trimmed content of a sysfs file, or "".
func readSysfs(elem ...string) string {
	b, err := os.ReadFile(filepath.Join(elem...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// formatGUID formats 8 bytes in network order as ibv_devinfo does.
func formatGUID(b [8]byte) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

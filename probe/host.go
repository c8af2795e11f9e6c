package probe

import (
	"net"
	"os"
	"sort"
	"strings"
)

// hostPaths are where doctor reads the kernel's state; tests of the
// parsers point them at a tree of their own.
type hostPaths struct {
	procModules string // /proc/modules
	sysModule   string // /sys/module
	pciDevices  string // /sys/bus/pci/devices
	devIB       string // /dev/infiniband
	ipv4        string // /proc/sys/net/ipv4
}

var realHost = hostPaths{procModules: "/proc/modules", sysModule: "/sys/module", pciDevices: "/sys/bus/pci/devices", devIB: "/dev/infiniband", ipv4: "/proc/sys/net/ipv4"}

// RDMA device drivers (kernel modules that register an ib_device).
var rdmaProviders = []string{"rdma_rxe", "siw", "mlx5_ib", "mlx4_ib", "irdma", "i40iw", "bnxt_re", "efa", "hfi1", "qedr",
	"iw_cxgb4", "hns_roce_hw_v2", "erdma", "mana_ib", "ocrdma", "vmw_pvrdma", "ib_qib", "ib_mthca", "usnic_verbs", "ionic_rdma"}

// loadedModules returns the kernel modules loaded: those /proc/modules
// lists, and those built in, which only /sys/module shows.
func loadedModules(h hostPaths) map[string]bool {
	m := map[string]bool{}
	if data, err := os.ReadFile(h.procModules); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, _, _ := strings.Cut(line, " "); name != "" {
				m[name] = true
			}
		}
	}
	if entries, err := os.ReadDir(h.sysModule); err == nil {
		for _, e := range entries {
			m[e.Name()] = true
		}
	}
	return m
}

// firstNetdev names an up, non-loopback network interface for the SoftRoCE
// hint, or "IF".
func firstNetdev() string {
	entries, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return "IF"
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if n == "lo" {
			continue
		}
		if st, err := os.ReadFile("/sys/class/net/" + n + "/operstate"); err == nil && strings.TrimSpace(string(st)) == "up" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "IF"
	}
	return names[0]
}

// netdevOf is the network device behind the port: its GIDs', or the
// device's parent (rxe, siw), or "".
func netdevOf(d Device, p Port) string {
	for _, g := range p.GIDs {
		if g.Netdev != "" {
			return g.Netdev
		}
	}
	if b, err := os.ReadFile("/sys/class/infiniband/" + d.Name + "/parent"); err == nil {
		if n := strings.TrimSpace(string(b)); n != "" {
			if _, err := net.InterfaceByName(n); err == nil {
				return n
			}
		}
	}
	// siw's GID starts with its netdev's MAC address.
	if len(p.GIDs) > 0 {
		ifs, _ := net.Interfaces()
		for _, ifi := range ifs {
			if len(ifi.HardwareAddr) == 6 && string(ifi.HardwareAddr) == string(p.GIDs[0].GID[:6]) {
				return ifi.Name
			}
		}
	}
	return ""
}

// netdevName is netdevOf, or "<netdev>" for a fix to fill in.
func netdevName(d Device, p Port) string {
	if n := netdevOf(d, p); n != "" {
		return n
	}
	return "<netdev>"
}

func netdevHasIP(name string) bool {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return false
	}
	addrs, _ := ifi.Addrs()
	return len(addrs) > 0
}

package probe

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// checkDevices checks the devices' ports, GID tables and MTUs, and the
// configured device, port and GID index.
func checkDevices(r *Report, cfg CheckConfig, devs []Device) {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	r.ok("devices", "devices: %s", strings.Join(names, ", "))
	if want := cfg.Device; want != "" {
		found := false
		for _, d := range devs {
			found = found || d.Name == want
		}
		if !found {
			r.fail("config", fmt.Sprintf("set rdma_device to one of %s (or leave it empty: the first device with an ACTIVE port)", strings.Join(names, ", ")),
				"the configured device %s does not exist here", want)
		}
	}
	active := 0
	for _, d := range devs {
		if cfg.Device != "" && d.Name != cfg.Device {
			continue
		}
		if d.MaxSGE > 0 && cfg.MaxSGE > d.MaxSGE {
			r.fail("config", fmt.Sprintf("set rdma_max_sge to %d or less", d.MaxSGE),
				"the configured rdma_max_sge %d is above %s's max_sge %d: the rdma transport will not use %s", cfg.MaxSGE, d.Name, d.MaxSGE, d.Name)
		}
		for _, wr := range []struct {
			key string
			n   int
		}{{"rdma_max_send_wr", cfg.MaxSendWR}, {"rdma_max_recv_wr", cfg.MaxRecvWR}} {
			if d.MaxQPWR > 0 && wr.n > d.MaxQPWR {
				r.fail("config", fmt.Sprintf("set %s to %d or less", wr.key, d.MaxQPWR),
					"the configured %s %d is above %s's max_qp_wr %d: its queue pairs cannot be created", wr.key, wr.n, d.Name, d.MaxQPWR)
			}
		}
		for _, p := range d.Ports {
			if cfg.Port != 0 && p.Num != cfg.Port {
				continue
			}
			if p.State != "ACTIVE" {
				fix := fmt.Sprintf("ip link set %s up   # the port follows its netdev (RoCE)", netdevName(d, p))
				if p.LinkLayer == "InfiniBand" {
					fix = "check the cable and that a subnet manager runs: systemctl start opensm"
				}
				r.warn("port", fix, "%s port %d is %s", d.Name, p.Num, p.State)
				continue
			}
			active++
			kind := "InfiniBand"
			switch {
			case d.Transport == "iWARP":
				kind = "iWARP over Ethernet"
			case p.LinkLayer == "Ethernet":
				kind = "RoCE (Ethernet)"
			}
			r.ok("port", "%s port %d ACTIVE, %s", d.Name, p.Num, kind)
			checkMTU(r, cfg, d, p)
			checkGIDs(r, cfg, d, p)
		}
	}
	if cfg.Port != 0 && active == 0 {
		r.fail("config", "set rdma_port to an ACTIVE port (or 0: the first ACTIVE one)", "the configured port %d is not an ACTIVE port of %s", cfg.Port, strings.Join(names, ", "))
	} else if active == 0 {
		r.fail("port", "ip link set <netdev> up (RoCE), or start a subnet manager: systemctl start opensm (InfiniBand)", "no ACTIVE port on any device")
	}
}

// checkGIDs prints the port's GID table and names the entry to use: the
// RoCE v2 entry on RoCE, the netdev's address on iWARP.
func checkGIDs(r *Report, cfg CheckConfig, d Device, p Port) {
	var table []string
	for _, g := range p.GIDs {
		e := fmt.Sprintf("%d %s %s", g.Index, g.String(), g.Type)
		if g.Netdev != "" {
			e += " " + g.Netdev
		}
		table = append(table, e)
	}
	if len(table) == 0 {
		r.fail("gid", "ip addr add <address>/<prefix> dev "+netdevName(d, p), "%s port %d: the GID table is empty", d.Name, p.Num)
		return
	}
	r.ok("gid", "%s port %d GID table (index gid type netdev): %s", d.Name, p.Num, strings.Join(table, "; "))
	if want, set := cfg.GIDIndex, cfg.GIDIndexSet; set {
		var g *GID
		for i := range p.GIDs {
			if p.GIDs[i].Index == want {
				g = &p.GIDs[i]
			}
		}
		switch {
		case g == nil:
			r.fail("config", "set rdma_gid_index to an index of the table above, or auto", "%s port %d: the configured gid_index %d is not in the GID table", d.Name, p.Num, want)
		case p.LinkLayer == "Ethernet" && d.Transport != "iWARP" && (g.LinkLocal || g.Type != "RoCE v2"):
			r.warn("config", "rdma_gid_index: auto   # picks the routable RoCE v2 entry", "%s port %d: the configured gid_index %d is %s%s, which does not route across subnets", d.Name, p.Num, want, g.Type, map[bool]string{true: " link-local", false: ""}[g.LinkLocal])
		}
	}
	switch {
	case d.Transport == "iWARP":
		// iWARP runs over TCP/IP: rdma_cm needs an address on the netdev.
		nd := netdevOf(d, p)
		if nd == "" || !netdevHasIP(nd) {
			nd = netdevName(d, p)
			r.fail("gid", "ip addr add <address>/<prefix> dev "+nd, "%s port %d: netdev %s has no IP address, which iWARP connection setup (rdma_cm) needs", d.Name, p.Num, nd)
		} else {
			r.ok("gid", "%s port %d: iWARP over netdev %s, connected through rdma_cm (no RoCE GID applies)", d.Name, p.Num, nd)
		}
	case p.LinkLayer == "Ethernet":
		var best *GID
		for i := range p.GIDs {
			g := &p.GIDs[i]
			if g.LinkLocal || g.Type != "RoCE v2" {
				continue
			}
			if best == nil || (g.IPv4Mapped && !best.IPv4Mapped) {
				best = g
			}
		}
		if best == nil {
			r.fail("gid", "ip addr add <address>/<prefix> dev "+netdevName(d, p)+"   # a RoCE v2 GID appears for it",
				"%s port %d has no routable RoCE v2 GID (only link-local or RoCE v1 ones, which do not route)", d.Name, p.Num)
			return
		}
		r.ok("gid", "%s port %d: RoCE v2 GID index %d %s (%s) is the one to use (rdma_gid_index: %d; auto picks it)", d.Name, p.Num, best.Index, best.String(), best.Netdev, best.Index)
	default:
		r.ok("gid", "%s port %d: InfiniBand, GID index 0 (LID %d)", d.Name, p.Num, p.LID)
	}
}

// checkMTU compares the port's active MTU with its maximum, the netdev's
// MTU and the configured rdma_mtu.
func checkMTU(r *Report, cfg CheckConfig, d Device, p Port) {
	msg := fmt.Sprintf("%s port %d: active MTU %d (max %d)", d.Name, p.Num, p.ActiveMTU, p.MaxMTU)
	nd := netdevOf(d, p)
	ndMTU := 0
	if nd != "" {
		if ifi, err := net.InterfaceByName(nd); err == nil {
			ndMTU = ifi.MTU
			msg += fmt.Sprintf(", netdev %s MTU %d", nd, ndMTU)
		}
	}
	if cfg.MTU != 0 && cfg.MTU > p.ActiveMTU {
		r.warn("mtu", fmt.Sprintf("set rdma_mtu to %d or less, or raise the port's MTU", p.ActiveMTU), "%s; the configured rdma_mtu %d is above it, so the path uses %d", msg, cfg.MTU, p.ActiveMTU)
		return
	}
	if p.LinkLayer == "Ethernet" && d.Transport != "iWARP" && p.ActiveMTU < 4096 && p.ActiveMTU < p.MaxMTU && nd != "" {
		// RoCE's path MTU is the largest of 256..4096 that fits the netdev's
		// MTU with the RoCE headers.
		r.warn("mtu", fmt.Sprintf("ip link set dev %s mtu 9000   # jumbo frames on every hop: a RoCE MTU of 4096", nd),
			"%s: larger RDMA messages need a larger netdev MTU", msg)
		return
	}
	r.ok("mtu", "%s", msg)
}

// checkDevFiles checks that the verbs and rdma_cm device files exist and
// can be opened read-write.
func checkDevFiles(r *Report, h hostPaths, needCM bool, loaded map[string]bool) {
	const udev = "echo 'KERNEL==\"uverbs*|rdma_cm\", MODE=\"0666\"' > /etc/udev/rules.d/90-rdma.rules && udevadm control --reload-rules && udevadm trigger\n" +
		"or: usermod -a -G rdma $USER (and log in again); in a container: --device=/dev/infiniband"
	if entries, err := filepath.Glob(filepath.Join(h.devIB, "uverbs*")); err == nil && len(entries) > 0 {
		if bad := notOpenable(entries); len(bad) > 0 {
			r.fail("permissions", udev, "cannot open %s read-write", strings.Join(bad, ", "))
		} else {
			r.ok("permissions", "%s/uverbs* can be opened read-write", h.devIB)
		}
	} else {
		r.fail("permissions", "modprobe ib_uverbs; in a container: --device=/dev/infiniband", "no %s/uverbs* device files", h.devIB)
	}
	cm := filepath.Join(h.devIB, "rdma_cm")
	report := r.warn
	why := "needed by iWARP devices and rdma_use_cm"
	if needCM {
		report = r.fail
		why = "needed here: an iWARP device or rdma_use_cm"
	}
	switch _, err := os.Stat(cm); {
	case err != nil:
		fix := "modprobe -a rdma_cm rdma_ucm   # creates " + cm + "; in a container: --device=" + cm
		if loaded["rdma_ucm"] {
			fix = "rdma_ucm is loaded but " + cm + " is missing: udevadm trigger; in a container: --device=" + cm
		}
		report("rdma_cm", fix, "rdma_cm is not available: no %s (%s)", cm, why)
	case len(notOpenable([]string{cm})) > 0:
		report("rdma_cm", udev, "cannot open %s read-write (%s)", cm, why)
	default:
		r.ok("rdma_cm", "rdma_cm available: %s can be opened read-write", cm)
	}
}

// notOpenable returns the paths that cannot be opened read-write.
func notOpenable(paths []string) []string {
	var bad []string
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			bad = append(bad, p)
			continue
		}
		f.Close()
	}
	return bad
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/probe"
)

func newDoctorCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for RDMA and print the exact fix for each problem",
		Long: "doctor runs the production checklist of an RDMA host and says, for each check that fails,\n" +
			"the command that fixes it:\n" +
			"  - the build has verbs (cgo) and libibverbs loads;\n" +
			"  - kernel modules: ib_core, ib_uverbs, rdma_cm/rdma_ucm and a device driver\n" +
			"    (rdma_rxe, siw, mlx5_ib, irdma, bnxt_re, ...) are loaded;\n" +
			"  - devices, and their ports ACTIVE;\n" +
			"  - the GID table, naming the RoCE v2 entry to use (iWARP: the netdev's address);\n" +
			"  - the active MTU against the netdev's;\n" +
			"  - /dev/infiniband/uverbs* and /dev/infiniband/rdma_cm can be opened read-write;\n" +
			"  - the memlock limit covers the pool (memory_mb), and huge pages;\n" +
			"  - where a GPU is present, nvidia-peermem or DMA-BUF (else: skipped, no GPU), and that the\n" +
			"    CUDA driver loads: each GPU's memory, DMA-BUF support and BAR1 size (GPU memory, --memory cuda:N);\n" +
			"  - and that tcp and shm work, which they do without RDMA.\n" +
			"The config in use (--config, XFER_ variables, flags) is checked too: its device, port and\n" +
			"GID index must exist. It exits 1 when a check fails (warnings do not count).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			r := doctorHost(cfg)
			if asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				r.print(g.stdout)
			}
			if r.Failed > 0 {
				return &exitError{fmt.Sprintf("%d check(s) failed", r.Failed)} // the summary said so
			}
			return nil
		},
	}
	cmd.Flags().Int("memory-mb", xfer.DefaultMemoryMB, "the pool size to check the memlock limit against, in `MiB`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checks as JSON: {checks: [{check, status, message, fix}], failed, warned}")
	return cmd
}

// Check statuses.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
	statusSkip = "skip"
)

// checkResult is one line of doctor's report.
type checkResult struct {
	Check   string `json:"check"` // what was checked: "modules", "port", "gid", ...
	Status  string `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"` // the command that fixes a fail or warn
}

// doctorReport is what doctor found.
type doctorReport struct {
	Checks []checkResult `json:"checks"`
	Failed int           `json:"failed"`
	Warned int           `json:"warned"`
}

func (r *doctorReport) add(check, status, fix, format string, args ...any) {
	r.Checks = append(r.Checks, checkResult{Check: check, Status: status, Message: fmt.Sprintf(format, args...), Fix: fix})
	switch status {
	case statusFail:
		r.Failed++
	case statusWarn:
		r.Warned++
	}
}

func (r *doctorReport) ok(check, format string, args ...any) {
	r.add(check, statusOK, "", format, args...)
}
func (r *doctorReport) skip(check, format string, args ...any) {
	r.add(check, statusSkip, "", format, args...)
}
func (r *doctorReport) warn(check, fix, format string, args ...any) {
	r.add(check, statusWarn, fix, format, args...)
}
func (r *doctorReport) fail(check, fix, format string, args ...any) {
	r.add(check, statusFail, fix, format, args...)
}

var statusTags = map[string]string{statusOK: "[ OK ]", statusWarn: "[WARN]", statusFail: "[FAIL]", statusSkip: "[SKIP]"}

// print writes the report as text: a line per check, its fix below it,
// and a summary.
func (r *doctorReport) print(w io.Writer) {
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%s %s\n", statusTags[c.Status], c.Message)
		if c.Fix != "" {
			fmt.Fprintf(w, "       fix: %s\n", strings.ReplaceAll(c.Fix, "\n", "\n            "))
		}
	}
	if r.Failed == 0 {
		fmt.Fprintln(w, "\nAll checks passed: the rdma transport can be used.")
	} else {
		fmt.Fprintf(w, "\n%d check(s) failed. tcp and shm work without RDMA; transport: auto uses them.\n", r.Failed)
	}
}

// doctor runs the checks, prints them as text and returns how many failed.
func doctor(w io.Writer, cfg xfer.Config) int {
	r := doctorHost(cfg)
	r.print(w)
	return r.Failed
}

// hostPaths are where doctor reads the kernel's state; tests of the
// parsers point them at a tree of their own.
type hostPaths struct {
	procModules string // /proc/modules
	sysModule   string // /sys/module
	pciDevices  string // /sys/bus/pci/devices
	devIB       string // /dev/infiniband
}

var realHost = hostPaths{procModules: "/proc/modules", sysModule: "/sys/module", pciDevices: "/sys/bus/pci/devices", devIB: "/dev/infiniband"}

// RDMA device drivers (kernel modules that register an ib_device).
var rdmaProviders = []string{"rdma_rxe", "siw", "mlx5_ib", "mlx4_ib", "irdma", "i40iw", "bnxt_re", "efa", "hfi1", "qedr",
	"iw_cxgb4", "hns_roce_hw_v2", "erdma", "mana_ib", "ocrdma", "vmw_pvrdma", "ib_qib", "ib_mthca", "usnic_verbs", "ionic_rdma"}

// doctorHost runs every check against this host.
func doctorHost(cfg xfer.Config) *doctorReport {
	return runChecks(cfg, realHost)
}

func runChecks(cfg xfer.Config, h hostPaths) *doctorReport {
	r := &doctorReport{Checks: []checkResult{}}
	memMB := cfg.MemoryMB
	if memMB == 0 {
		memMB = xfer.DefaultMemoryMB
	}
	// The build and the library.
	built, why := probe.VerbsBuilt()
	if !built {
		r.fail("build", "CGO_ENABLED=1 go build -o xfer ./cmd/xfer   # needs gcc; libibverbs is loaded at run time",
			"this xfer has no verbs transport: %s", why)
	} else {
		r.ok("build", "this xfer has the verbs transport (built with cgo)")
	}
	libOK := true
	if !built {
		libOK = false
		r.skip("libibverbs", "libibverbs and the devices: not checked, this build cannot load libibverbs (rebuild it: above)")
	} else if err := probe.Verbs(); err != nil {
		libOK = false
		r.fail("libibverbs", "apt-get install -y rdma-core ibverbs-providers   # Debian/Ubuntu\n"+
			"dnf install -y rdma-core libibverbs             # Fedora/RHEL", "libibverbs: %v", err)
	} else {
		r.ok("libibverbs", "libibverbs loads")
	}
	// Kernel modules.
	loaded := loadedModules(h)
	var missing []string
	for _, m := range []string{"ib_core", "ib_uverbs"} {
		if !loaded[m] {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		r.fail("modules", "modprobe -a "+strings.Join(missing, " ")+"\n"+
			"persistent: printf '%s\\n' "+strings.Join(missing, " ")+" > /etc/modules-load.d/rdma.conf",
			"kernel modules not loaded: %s (the verbs core and its user-space interface)", strings.Join(missing, ", "))
	} else {
		r.ok("modules", "kernel modules loaded: ib_core, ib_uverbs")
	}
	var providers []string
	for _, m := range rdmaProviders {
		if loaded[m] {
			providers = append(providers, m)
		}
	}
	if len(providers) == 0 {
		netdev := firstNetdev()
		r.fail("modules", fmt.Sprintf("modprobe mlx5_ib   # or your NIC's driver: irdma, bnxt_re, ...\n"+
			"without an RDMA NIC, SoftRoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev %s", netdev),
			"no RDMA device driver loaded (one of %s)", strings.Join(rdmaProviders[:8], ", ")+", ...")
	} else {
		r.ok("modules", "RDMA device drivers loaded: %s", strings.Join(providers, ", "))
	}
	// Devices, ports, GIDs, MTU.
	var devs []probe.Device
	if libOK {
		var err error
		if devs, err = probe.Devices(); err != nil {
			r.fail("devices", "", "listing devices: %v", err)
		}
	}
	if libOK && len(devs) == 0 {
		netdev := firstNetdev()
		r.fail("devices", fmt.Sprintf("modprobe rdma_rxe && rdma link add rxe0 type rxe netdev %s   # SoftRoCE on %s\n"+
			"(check the kernel has it: modinfo rdma_rxe; or load your NIC's driver: modprobe mlx5_ib, ...)", netdev, netdev), "no RDMA devices (ibv_devices lists none)")
	} else if !libOK && built {
		r.fail("devices", "install libibverbs first (above)", "RDMA devices cannot be listed without libibverbs")
	}
	needCM := cfg.RDMA.UseCM
	if len(devs) > 0 {
		checkDevices(r, cfg, devs)
		for _, d := range devs {
			needCM = needCM || d.Transport == "iWARP"
		}
	}
	// /dev/infiniband.
	checkDevFiles(r, h, needCM, loaded)
	// memlock.
	need := uint64(memMB) << 20
	cur, err := probe.MemlockLimit()
	switch {
	case err != nil:
		r.warn("memlock", "", "memlock limit: %v", err)
	case os.Geteuid() == 0:
		r.ok("memlock", "memlock: running as root (CAP_IPC_LOCK), the limit (%s) does not apply", limitString(cur))
	case cur < need:
		r.fail("memlock", "ulimit -l unlimited   # this shell; or in /etc/security/limits.conf: * soft memlock unlimited / * hard memlock unlimited; systemd: LimitMEMLOCK=infinity; docker: --ulimit memlock=-1 --cap-add=IPC_LOCK",
			"memlock limit %s is below the %d MiB pool (memory_mb): registration will fail", limitString(cur), memMB)
	default:
		r.ok("memlock", "memlock limit %s covers the %d MiB pool", limitString(cur), memMB)
	}
	// Huge pages.
	switch mode := probe.THPMode(); mode {
	case "always", "madvise":
		r.ok("hugepages", "transparent huge pages: %s (regions ask for them with madvise)", mode)
	case "":
		r.warn("hugepages", "", "transparent huge pages: unknown on this kernel")
	default:
		r.warn("hugepages", "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled", "transparent huge pages are %s: regions use 4 KiB pages (more NIC translation entries)", mode)
	}
	if ht, err := probe.HugeTLBPages(); err == nil {
		if cfg.HugePages == mem.HugeExplicit && ht.Free*ht.PageSize < int(need) {
			r.fail("hugepages", fmt.Sprintf("echo %d > /proc/sys/vm/nr_hugepages", (int(need)+ht.PageSize-1)/max(ht.PageSize, 1)+ht.Total-ht.Free),
				"huge_pages: explicit, but only %d free huge pages of %d KiB for a %d MiB pool", ht.Free, ht.PageSize>>10, memMB)
		} else {
			r.ok("hugepages", "hugetlb pages: %d reserved, %d free", ht.Total, ht.Free)
		}
	}
	nvidia := checkGPU(r, h, loaded)
	checkCUDA(r, nvidia)
	// The transports that need no RDMA.
	r.ok("tcp", "tcp: works on every host (the fallback of transport: auto)")
	if err := probe.Memfd(); err != nil {
		r.warn("shm", "", "shm: %v: same-host peers use tcp", err)
	} else if err := probe.Pidfd(); err != nil {
		r.warn("shm", "", "shm: %v: same-host peers use tcp", err)
	} else {
		r.ok("shm", "shm: works (memfd_create and pidfd_getfd) for peers on this host")
	}
	return r
}

// checkDevices checks the devices' ports, GID tables and MTUs, and the
// configured device, port and GID index.
func checkDevices(r *doctorReport, cfg xfer.Config, devs []probe.Device) {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	r.ok("devices", "devices: %s", strings.Join(names, ", "))
	if want := cfg.RDMA.Device; want != "" {
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
		if cfg.RDMA.Device != "" && d.Name != cfg.RDMA.Device {
			continue
		}
		if d.MaxSGE > 0 && cfg.RDMA.MaxSGE > d.MaxSGE {
			r.fail("config", fmt.Sprintf("set rdma_max_sge to %d or less", d.MaxSGE),
				"the configured rdma_max_sge %d is above %s's max_sge %d: the rdma transport will not use %s", cfg.RDMA.MaxSGE, d.Name, d.MaxSGE, d.Name)
		}
		for _, wr := range []struct {
			key string
			n   int
		}{{"rdma_max_send_wr", cfg.RDMA.MaxSendWR}, {"rdma_max_recv_wr", cfg.RDMA.MaxRecvWR}} {
			if d.MaxQPWR > 0 && wr.n > d.MaxQPWR {
				r.fail("config", fmt.Sprintf("set %s to %d or less", wr.key, d.MaxQPWR),
					"the configured %s %d is above %s's max_qp_wr %d: its queue pairs cannot be created", wr.key, wr.n, d.Name, d.MaxQPWR)
			}
		}
		for _, p := range d.Ports {
			if cfg.RDMA.Port != 0 && p.Num != cfg.RDMA.Port {
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
	if cfg.RDMA.Port != 0 && active == 0 {
		r.fail("config", "set rdma_port to an ACTIVE port (or 0: the first ACTIVE one)", "the configured port %d is not an ACTIVE port of %s", cfg.RDMA.Port, strings.Join(names, ", "))
	} else if active == 0 {
		r.fail("port", "ip link set <netdev> up (RoCE), or start a subnet manager: systemctl start opensm (InfiniBand)", "no ACTIVE port on any device")
	}
}

// checkGIDs prints the port's GID table and names the entry to use: the
// RoCE v2 entry on RoCE, the netdev's address on iWARP.
func checkGIDs(r *doctorReport, cfg xfer.Config, d probe.Device, p probe.Port) {
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
	if want, set := cfg.RDMA.GIDIndex.Index(); set {
		var g *probe.GID
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
		var best *probe.GID
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
func checkMTU(r *doctorReport, cfg xfer.Config, d probe.Device, p probe.Port) {
	msg := fmt.Sprintf("%s port %d: active MTU %d (max %d)", d.Name, p.Num, p.ActiveMTU, p.MaxMTU)
	nd := netdevOf(d, p)
	ndMTU := 0
	if nd != "" {
		if ifi, err := net.InterfaceByName(nd); err == nil {
			ndMTU = ifi.MTU
			msg += fmt.Sprintf(", netdev %s MTU %d", nd, ndMTU)
		}
	}
	if cfg.RDMA.MTU != 0 && cfg.RDMA.MTU > p.ActiveMTU {
		r.warn("mtu", fmt.Sprintf("set rdma_mtu to %d or less, or raise the port's MTU", p.ActiveMTU), "%s; the configured rdma_mtu %d is above it, so the path uses %d", msg, cfg.RDMA.MTU, p.ActiveMTU)
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
func checkDevFiles(r *doctorReport, h hostPaths, needCM bool, loaded map[string]bool) {
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

// PCI vendor ids of GPU makers, and the display controller class.
const (
	pciVendorNVIDIA = "0x10de"
	pciVendorAMD    = "0x1002"
	pciClassDisplay = "0x03"
)

// checkGPU checks GPUDirect RDMA where a GPU is present: nvidia-peermem for
// NVIDIA's driver (or DMA-BUF, which NVIDIA's open kernel modules export),
// DMA-BUF through amdgpu for AMD.
// It returns how many NVIDIA GPUs the PCI bus shows.
func checkGPU(r *doctorReport, h hostPaths, loaded map[string]bool) int {
	var nvidia, amd int
	entries, _ := os.ReadDir(h.pciDevices)
	for _, e := range entries {
		class, err1 := os.ReadFile(filepath.Join(h.pciDevices, e.Name(), "class"))
		vendor, err2 := os.ReadFile(filepath.Join(h.pciDevices, e.Name(), "vendor"))
		if err1 != nil || err2 != nil || !strings.HasPrefix(strings.TrimSpace(string(class)), pciClassDisplay) {
			continue
		}
		switch strings.TrimSpace(string(vendor)) {
		case pciVendorNVIDIA:
			nvidia++
		case pciVendorAMD:
			amd++
		}
	}
	if nvidia == 0 && amd == 0 {
		r.skip("gpu", "GPUDirect RDMA: no GPU on this host")
		return 0
	}
	if nvidia > 0 {
		switch {
		case loaded["nvidia_peermem"]:
			r.ok("gpu", "%d NVIDIA GPU(s): nvidia-peermem is loaded (GPUDirect RDMA)", nvidia)
		case !loaded["nvidia"]:
			r.fail("gpu", "install the NVIDIA driver after rdma-core/MLNX_OFED, then: modprobe nvidia-peermem",
				"%d NVIDIA GPU(s) but the nvidia driver is not loaded", nvidia)
		case openNVIDIAModules():
			r.ok("gpu", "%d NVIDIA GPU(s): the open kernel modules export GPU memory as DMA-BUF (nvidia-peermem is not loaded, nor needed for DMA-BUF)", nvidia)
		default:
			r.fail("gpu", "modprobe nvidia-peermem && echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf\n"+
				"(if it will not load: reinstall the GPU driver after rdma-core/MLNX_OFED so that it is built against their peer memory API)",
				"%d NVIDIA GPU(s), but nvidia-peermem is not loaded and the driver is not the open kernel module (no DMA-BUF)", nvidia)
		}
	}
	if amd > 0 {
		if loaded["amdgpu"] {
			r.ok("gpu", "%d AMD GPU(s): amdgpu exports GPU memory as DMA-BUF", amd)
		} else {
			r.fail("gpu", "modprobe amdgpu", "%d AMD GPU(s) but amdgpu is not loaded (no DMA-BUF)", amd)
		}
	}
	return nvidia
}

// checkCUDA checks that the CUDA driver loads and lists each GPU as GPU
// memory will use it. Without CUDA it fails where the PCI bus shows NVIDIA
// GPUs, and is skipped elsewhere.
func checkCUDA(r *doctorReport, nvidia int) {
	gpus, err := probe.GPUs()
	if err != nil {
		if nvidia > 0 {
			r.fail("cuda", "install the NVIDIA driver's user-space libraries (libcuda.so.1); in a container, run it with --gpus all",
				"%d NVIDIA GPU(s) on the PCI bus, but GPU memory cannot be used: %v", nvidia, err)
			return
		}
		r.skip("cuda", "GPU memory: %v", err)
		return
	}
	for _, g := range gpus {
		dmabuf := "no DMA-BUF (GPUDirect RDMA needs nvidia-peermem)"
		if g.DMABuf {
			dmabuf = "DMA-BUF"
		}
		bar1 := "BAR1 unknown"
		if g.BAR1Bytes > 0 {
			bar1 = "BAR1 " + bytesize.Format(int64(g.BAR1Bytes))
		}
		r.ok("cuda", "cuda:%d %s: %s, compute %s, %s, %s, driver %d.%d", g.Ordinal, g.Name,
			bytesize.Format(int64(g.MemoryBytes)), g.Compute, dmabuf, bar1, g.DriverMajor, g.DriverMinor)
	}
}

// openNVIDIAModules reports whether NVIDIA's driver is its open kernel
// module flavour, which supports DMA-BUF.
func openNVIDIAModules() bool {
	v, err := os.ReadFile("/proc/driver/nvidia/version")
	return err == nil && strings.Contains(string(v), "Open Kernel Module")
}

func limitString(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v>>10)
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
func netdevOf(d probe.Device, p probe.Port) string {
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
func netdevName(d probe.Device, p probe.Port) string {
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

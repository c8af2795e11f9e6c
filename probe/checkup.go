package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Checkup runs every check against this host and cfg. It reads the
// current state on every call: nothing is cached but the feature probes'
// answers.
func Checkup(cfg CheckConfig) *Report {
	return runChecks(cfg, realHost)
}

func runChecks(cfg CheckConfig, h hostPaths) *Report {
	r := &Report{Checks: []Check{}}
	memMB := cfg.MemoryMB
	// The build and the library.
	built, why := VerbsBuilt()
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
	} else if err := Verbs(); err != nil {
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
	var devs []Device
	if libOK {
		var err error
		if devs, err = Devices(); err != nil {
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
	needCM := cfg.UseCM
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
	cur, err := MemlockLimit()
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
	switch mode := THPMode(); mode {
	case "always", "madvise":
		r.ok("hugepages", "transparent huge pages: %s (regions ask for them with madvise)", mode)
	case "":
		r.warn("hugepages", "", "transparent huge pages: unknown on this kernel")
	default:
		r.warn("hugepages", "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled", "transparent huge pages are %s: regions use 4 KiB pages (more NIC translation entries)", mode)
	}
	if ht, err := HugeTLBPages(); err == nil {
		if cfg.HugeExplicit && ht.Free*ht.PageSize < int(need) {
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
	checkCongestion(r, h, cfg.Congestion)
	if err := Memfd(); err != nil {
		r.warn("shm", "", "shm: %v: same-host peers use tcp", err)
	} else if err := Pidfd(); err != nil {
		r.warn("shm", "", "shm: %v: same-host peers use tcp", err)
	} else {
		r.ok("shm", "shm: works (memfd_create and pidfd_getfd) for peers on this host")
	}
	return r
}

// checkCongestion reports the TCP congestion control xfer's connections
// get under tcp.congestion (mode), and whether the kernel has and allows
// a named one.
func checkCongestion(r *Report, h hostPaths, mode string) {
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(h.ipv4, "tcp_"+name))
		if err != nil {
			return nil
		}
		return strings.Fields(string(b))
	}
	def := read("congestion_control")
	if len(def) == 0 {
		r.skip("congestion", "tcp congestion control: unknown on this host (no %s)", filepath.Join(h.ipv4, "tcp_congestion_control"))
		return
	}
	available, allowed := read("available_congestion_control"), read("allowed_congestion_control")
	switch mode {
	case "", "auto":
		r.ok("congestion", "tcp congestion control: %s for peers on other hosts (the system's default), reno for peers on this host (tcp.congestion: auto)", def[0])
	case "system":
		r.ok("congestion", "tcp congestion control: %s on every connection (tcp.congestion: system)", def[0])
	case def[0]:
		r.ok("congestion", "tcp congestion control: %s on every connection (tcp.congestion, the system's default too)", mode)
	default:
		switch {
		case !slices.Contains(available, mode):
			r.fail("congestion", fmt.Sprintf("modprobe tcp_%s   # or set tcp.congestion to one of: %s", mode, strings.Join(available, " ")),
				"tcp.congestion %q: the kernel has no such algorithm (available: %s): connections will fail", mode, strings.Join(available, " "))
		case !slices.Contains(allowed, mode) && os.Geteuid() != 0:
			r.fail("congestion", fmt.Sprintf("sysctl -w net.ipv4.tcp_allowed_congestion_control='%s %s'   # or give xfer CAP_NET_ADMIN", strings.Join(allowed, " "), mode),
				"tcp.congestion %q: not allowed for unprivileged processes (allowed: %s): connections will fail", mode, strings.Join(allowed, " "))
		default:
			r.ok("congestion", "tcp congestion control: %s on every connection (tcp.congestion)", mode)
		}
	}
}

func limitString(v uint64) string {
	if v == ^uint64(0) {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v>>10)
}

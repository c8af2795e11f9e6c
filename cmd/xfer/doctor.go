package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/probe"
)

func newDoctorCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check this host for RDMA and print the exact fix for each problem",
		Long: "doctor checks what the rdma transport needs: the verbs library, devices, an ACTIVE port,\n" +
			"a routable GID, the memlock limit against the configured pool, permissions on\n" +
			"/dev/infiniband and huge pages. Each failure comes with the command that fixes it.\n" +
			"It exits 1 when a check fails (warnings do not count). tcp and shm work either way.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.config(cmd.Flags())
			if err != nil {
				return err
			}
			if failed := doctor(g.stdout, cfg); failed > 0 {
				return &exitError{fmt.Sprintf("%d check(s) failed", failed)} // the summary said so
			}
			return nil
		},
	}
	cmd.Flags().Int("memory-mb", xfer.DefaultMemoryMB, "the pool size to check the memlock limit against, in `MiB`")
	return cmd
}

type checker struct {
	w      io.Writer
	failed int
}

func (c *checker) ok(format string, args ...any) { fmt.Fprintf(c.w, "[ OK ] "+format+"\n", args...) }

func (c *checker) warn(fix string, format string, args ...any) {
	fmt.Fprintf(c.w, "[WARN] "+format+"\n", args...)
	if fix != "" {
		fmt.Fprintf(c.w, "       fix: %s\n", strings.ReplaceAll(fix, "\n", "\n            "))
	}
}

func (c *checker) fail(fix string, format string, args ...any) {
	c.failed++
	fmt.Fprintf(c.w, "[FAIL] "+format+"\n", args...)
	if fix != "" {
		fmt.Fprintf(c.w, "       fix: %s\n", strings.ReplaceAll(fix, "\n", "\n            "))
	}
}

// doctor runs the checks and returns how many failed.
func doctor(w io.Writer, cfg xfer.Config) int {
	c := &checker{w: w}
	memMB := cfg.MemoryMB
	if memMB == 0 {
		memMB = xfer.DefaultMemoryMB
	}
	libOK := true
	if err := probe.Verbs(); err != nil {
		libOK = false
		c.fail("apt-get install -y rdma-core ibverbs-providers   # Debian/Ubuntu\n"+
			"dnf install -y rdma-core libibverbs             # Fedora/RHEL", "libibverbs: %v", err)
	} else {
		c.ok("libibverbs loads")
	}
	var devs []probe.Device
	if libOK {
		var err error
		if devs, err = probe.Devices(); err != nil {
			c.fail("", "listing devices: %v", err)
		}
	}
	if libOK && len(devs) == 0 {
		netdev := firstNetdev()
		c.fail(fmt.Sprintf("modprobe rdma_rxe && rdma link add rxe0 type rxe netdev %s   # SoftRoCE on %s\n"+
			"(check the kernel has it: modinfo rdma_rxe; or load your NIC's driver: modprobe mlx5_ib, ...)", netdev, netdev), "no RDMA devices")
	}
	if len(devs) > 0 {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		c.ok("devices: %s", strings.Join(names, ", "))
		active := 0
		for _, d := range devs {
			for _, p := range d.Ports {
				if p.State != "ACTIVE" {
					fix := "ip link set <netdev> up   # the port follows its netdev (RoCE)"
					if p.LinkLayer == "InfiniBand" {
						fix = "check the cable and that a subnet manager runs: systemctl start opensm"
					}
					c.warn(fix, "%s port %d is %s", d.Name, p.Num, p.State)
					continue
				}
				active++
				c.ok("%s port %d ACTIVE, %s, active MTU %d", d.Name, p.Num, p.LinkLayer, p.ActiveMTU)
				if d.Transport == "iWARP" {
					// iWARP runs over TCP/IP: rdma_cm needs an address on the netdev.
					if gd := firstGID(p); gd != nil && gd.Netdev != "" && !netdevHasIP(gd.Netdev) {
						c.fail("ip addr add <address>/<prefix> dev "+gd.Netdev, "%s port %d: netdev %s has no IP address, which iWARP connection setup (rdma_cm) needs", d.Name, p.Num, gd.Netdev)
					} else {
						c.ok("%s port %d: iWARP, connected through rdma_cm", d.Name, p.Num)
					}
				} else if p.LinkLayer == "Ethernet" {
					routable := false
					for _, gd := range p.GIDs {
						if !gd.LinkLocal && gd.Type == "RoCE v2" {
							routable = true
							c.ok("%s port %d: routable GID %d %s (%s)", d.Name, p.Num, gd.Index, gd.String(), gd.Type)
							break
						}
					}
					if !routable {
						c.fail("ip addr add <address>/<prefix> dev <netdev>   # a RoCE v2 GID appears for it", "%s port %d has no routable RoCE v2 GID (only link-local ones, which do not route)", d.Name, p.Num)
					}
				}
			}
		}
		if active == 0 {
			c.fail("ip link set <netdev> up (RoCE), or start a subnet manager: systemctl start opensm (InfiniBand)", "no ACTIVE port on any device")
		}
	}
	// /dev/infiniband permissions.
	if entries, err := filepath.Glob("/dev/infiniband/uverbs*"); err == nil && len(entries) > 0 {
		bad := []string{}
		for _, p := range entries {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				bad = append(bad, p)
				continue
			}
			f.Close()
		}
		if len(bad) > 0 {
			c.fail("echo 'KERNEL==\"uverbs*\", MODE=\"0666\"' > /etc/udev/rules.d/90-rdma.rules && udevadm control --reload-rules && udevadm trigger\n"+
				"or: usermod -a -G rdma $USER (and log in again); in a container: --device=/dev/infiniband",
				"cannot open %s read-write", strings.Join(bad, ", "))
		} else {
			c.ok("/dev/infiniband/uverbs* can be opened read-write")
		}
	} else if len(devs) > 0 {
		c.fail("modprobe ib_uverbs; in a container: --device=/dev/infiniband", "no /dev/infiniband/uverbs* device files")
	}
	// memlock.
	need := uint64(memMB) << 20
	cur, err := probe.MemlockLimit()
	switch {
	case err != nil:
		c.warn("", "memlock limit: %v", err)
	case os.Geteuid() == 0:
		c.ok("memlock: running as root (CAP_IPC_LOCK), the limit (%s) does not apply", limitString(cur))
	case cur < need:
		c.fail(fmt.Sprintf("ulimit -l unlimited   # this shell; or in /etc/security/limits.conf: * soft memlock unlimited / * hard memlock unlimited; systemd: LimitMEMLOCK=infinity; docker: --ulimit memlock=-1 --cap-add=IPC_LOCK"),
			"memlock limit %s is below the %d MiB pool (memory_mb): registration will fail", limitString(cur), memMB)
	default:
		c.ok("memlock limit %s covers the %d MiB pool", limitString(cur), memMB)
	}
	// Huge pages.
	switch mode := probe.THPMode(); mode {
	case "always", "madvise":
		c.ok("transparent huge pages: %s (regions ask for them with madvise)", mode)
	case "":
		c.warn("", "transparent huge pages: unknown on this kernel")
	default:
		c.warn("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled", "transparent huge pages are %s: regions use 4 KiB pages (more NIC translation entries)", mode)
	}
	if ht, err := probe.HugeTLBPages(); err == nil {
		if cfg.HugePages == mem.HugeExplicit && ht.Free*ht.PageSize < int(need) {
			c.fail(fmt.Sprintf("echo %d > /proc/sys/vm/nr_hugepages", (int(need)+ht.PageSize-1)/max(ht.PageSize, 1)+ht.Total-ht.Free),
				"huge_pages: explicit, but only %d free huge pages of %d KiB for a %d MiB pool", ht.Free, ht.PageSize>>10, memMB)
		} else {
			c.ok("hugetlb pages: %d reserved, %d free", ht.Total, ht.Free)
		}
	}
	if c.failed == 0 {
		fmt.Fprintln(w, "\nAll checks passed: the rdma transport can be used.")
	} else {
		fmt.Fprintf(w, "\n%d check(s) failed. tcp and shm work without RDMA; transport: auto uses them.\n", c.failed)
	}
	return c.failed
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

func firstGID(p probe.Port) *probe.GID {
	if len(p.GIDs) == 0 {
		return nil
	}
	return &p.GIDs[0]
}

func netdevHasIP(name string) bool {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return false
	}
	addrs, _ := ifi.Addrs()
	return len(addrs) > 0
}

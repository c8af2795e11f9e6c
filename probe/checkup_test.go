package probe

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// noRDMA skips a test of the failing path on a host that has RDMA.
func noRDMA(t *testing.T) {
	t.Helper()
	if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
		t.Skip("this host has RDMA devices; the VM run covers doctor's passing path")
	}
}

// find returns the checks named check with the given status.
func find(r *Report, check, status string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Check == check && c.Status == status {
			out = append(out, c)
		}
	}
	return out
}

// On a host without RDMA (this CI machine's kernel has none), every rdma
// check fails or warns with the command that fixes it, tcp and shm are
// reported working, and the GPU check is skipped for want of a GPU.
func TestCheckupWithoutRDMA(t *testing.T) {
	noRDMA(t)
	r := Checkup(CheckConfig{MemoryMB: 64})
	var out strings.Builder
	for _, c := range r.Checks {
		fmt.Fprintf(&out, "%s %s: %s (fix: %s)\n", c.Status, c.Check, c.Message, c.Fix)
	}
	if r.Failed == 0 {
		t.Fatalf("doctor passed on a host without RDMA:\n%s", out.String())
	}
	wants := []struct{ check, status, fix string }{
		{"modules", StatusFail, "modprobe -a ib_core ib_uverbs"},
		{"modules", StatusFail, "rdma link add rxe0 type rxe netdev"},
		{"devices", StatusFail, "rdma link add rxe0 type rxe netdev"},
		{"permissions", StatusFail, "modprobe ib_uverbs"},
		{"rdma_cm", StatusWarn, "modprobe -a rdma_cm rdma_ucm"},
	}
	if built, _ := VerbsBuilt(); !built {
		// Without cgo the devices are not listed; the build is the fix.
		wants[2] = struct{ check, status, fix string }{"build", StatusFail, "CGO_ENABLED=1 go build"}
	} else if Verbs() != nil {
		// Without libibverbs the devices are not listed; installing it
		// is the fix.
		wants[2] = struct{ check, status, fix string }{"devices", StatusFail, "install libibverbs first"}
	}
	for _, want := range wants {
		found := false
		for _, c := range find(r, want.check, want.status) {
			found = found || strings.Contains(c.Fix, want.fix)
		}
		if !found {
			t.Errorf("no %s %s check with the fix %q:\n%s", want.status, want.check, want.fix, out.String())
		}
	}
	for _, c := range r.Checks {
		if (c.Status == StatusFail || c.Status == StatusWarn) && c.Fix == "" && c.Check != "hugepages" {
			t.Errorf("%s %s has no fix: %s", c.Status, c.Check, c.Message)
		}
		if c.Status == StatusOK && c.Check != "build" && c.Check != "libibverbs" && c.Check != "memlock" && c.Check != "hugepages" && c.Check != "tcp" && c.Check != "congestion" && c.Check != "shm" {
			t.Errorf("%s passed on a host without RDMA: %s", c.Check, c.Message)
		}
	}
	if len(find(r, "tcp", StatusOK)) != 1 || len(find(r, "shm", StatusOK)) != 1 {
		t.Errorf("tcp and shm are not reported working:\n%s", out.String())
	}
	if g := find(r, "gpu", StatusSkip); len(g) != 1 || !strings.Contains(g[0].Message, "no GPU") {
		t.Errorf("the GPU check on a host without a GPU:\n%s", out.String())
	}
}

// The GPU check on a host tree with an NVIDIA GPU: without nvidia-peermem
// it fails with the modprobe that fixes it; with it, it passes. The
// modules come from /proc/modules' format.
func TestCheckupGPU(t *testing.T) {
	h := hostPaths{procModules: "testdata/gpuhost/modules", sysModule: "testdata/gpuhost/none", pciDevices: "testdata/gpuhost/pci", devIB: "testdata/gpuhost/none"}
	loaded := loadedModules(h)
	for _, m := range []string{"nvidia", "mlx5_ib", "ib_core", "ib_uverbs"} {
		if !loaded[m] {
			t.Errorf("module %s not found in %s", m, h.procModules)
		}
	}
	r := &Report{}
	checkGPU(r, h, loaded)
	if g := find(r, "gpu", StatusFail); len(g) != 1 || !strings.Contains(g[0].Fix, "modprobe nvidia-peermem") || !strings.Contains(g[0].Message, "1 NVIDIA GPU") {
		t.Errorf("an NVIDIA GPU without nvidia-peermem: %+v", r.Checks)
	}
	h.procModules = "testdata/gpuhost/modules-peermem"
	r = &Report{}
	checkGPU(r, h, loadedModules(h))
	if len(find(r, "gpu", StatusOK)) != 1 {
		t.Errorf("an NVIDIA GPU with nvidia-peermem: %+v", r.Checks)
	}
}

// has reports whether r holds a check named check with the status whose
// message (and, when fix is not "", fix) contain the given texts.
func has(r *Report, check, status, msg, fix string) bool {
	for _, c := range find(r, check, status) {
		if strings.Contains(c.Message, msg) && strings.Contains(c.Fix, fix) {
			return true
		}
	}
	return false
}

// TestCheckDevices runs the device, port, GID and MTU checks on devices
// described here, against configs that ask for what they cannot give: each
// mismatch fails or warns with its fix, and the RoCE v2 GID to use is
// named.
func TestCheckDevices(t *testing.T) {
	gid := func(i int, typ string, linkLocal bool, last byte) GID {
		g := GID{Index: i, Type: typ, Netdev: "xfertest0", LinkLocal: linkLocal, IPv4Mapped: !linkLocal}
		if linkLocal {
			g.GID = [16]byte{0: 0xfe, 1: 0x80, 15: last}
		} else {
			g.GID = [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: last}
		}
		return g
	}
	roce := Device{Name: "roce9", Transport: "InfiniBand", MaxSGE: 30, MaxQPWR: 1024, Ports: []Port{{
		Num: 1, State: "ACTIVE", LinkLayer: "Ethernet", ActiveMTU: 1024, MaxMTU: 4096,
		GIDs: []GID{gid(0, "RoCE v2", true, 1), gid(1, "RoCE v1", false, 2), gid(3, "RoCE v2", false, 3)},
	}}}
	ib := Device{Name: "ib9", Transport: "InfiniBand", Ports: []Port{{Num: 1, State: "DOWN", LinkLayer: "InfiniBand"}}}

	r := &Report{}
	checkDevices(r, CheckConfig{Device: "roce9", MaxSGE: 64, MaxSendWR: 4096, MTU: 2048, GIDIndex: 0, GIDIndexSet: true}, []Device{roce, ib})
	for _, w := range []struct{ check, status, msg, fix string }{
		{"devices", StatusOK, "devices: roce9, ib9", ""},
		{"config", StatusFail, "the configured rdma_max_sge 64 is above roce9's max_sge 30", "set rdma_max_sge to 30 or less"},
		{"config", StatusFail, "the configured rdma_max_send_wr 4096 is above roce9's max_qp_wr 1024", "set rdma_max_send_wr to 1024 or less"},
		{"port", StatusOK, "roce9 port 1 ACTIVE, RoCE (Ethernet)", ""},
		{"mtu", StatusWarn, "the configured rdma_mtu 2048 is above it", "set rdma_mtu to 1024 or less"},
		{"gid", StatusOK, "0 fe80:0000:0000:0000:0000:0000:0000:0001 RoCE v2 xfertest0", ""},
		{"config", StatusWarn, "the configured gid_index 0 is RoCE v2 link-local", "rdma_gid_index: auto"},
		{"gid", StatusOK, "RoCE v2 GID index 3", ""},
	} {
		if !has(r, w.check, w.status, w.msg, w.fix) {
			t.Errorf("no %s %s check saying %q with the fix %q in %+v", w.status, w.check, w.msg, w.fix, r.Checks)
		}
	}
	if len(find(r, "port", StatusWarn)) != 0 {
		t.Errorf("ib9's port was checked though the config names roce9: %+v", r.Checks)
	}

	r = &Report{}
	checkDevices(r, CheckConfig{Device: "nosuch0", Port: 2}, []Device{roce, ib})
	if !has(r, "config", StatusFail, "the configured device nosuch0 does not exist here", "set rdma_device to one of roce9, ib9") ||
		!has(r, "config", StatusFail, "the configured port 2 is not an ACTIVE port", "") {
		t.Errorf("a config naming a device and a port not there: %+v", r.Checks)
	}

	r = &Report{}
	checkDevices(r, CheckConfig{}, []Device{ib})
	if !has(r, "port", StatusWarn, "ib9 port 1 is DOWN", "systemctl start opensm") || !has(r, "port", StatusFail, "no ACTIVE port on any device", "") {
		t.Errorf("an InfiniBand device whose port is down: %+v", r.Checks)
	}

	r = &Report{}
	checkDevices(r, CheckConfig{GIDIndex: 7, GIDIndexSet: true}, []Device{roce})
	if !has(r, "config", StatusFail, "the configured gid_index 7 is not in the GID table", "") || r.Failed != 1 {
		t.Errorf("a gid_index not in the table: %+v", r.Checks)
	}
	roce.Ports[0].GIDs = roce.Ports[0].GIDs[:2] // no routable RoCE v2 entry left
	r = &Report{}
	checkDevices(r, CheckConfig{}, []Device{roce})
	if !has(r, "gid", StatusFail, "roce9 port 1 has no routable RoCE v2 GID", "ip addr add <address>/<prefix> dev xfertest0") {
		t.Errorf("a RoCE port without a routable RoCE v2 GID: %+v", r.Checks)
	}
}

// The congestion check on a host tree: what auto and system give, a name
// the kernel lacks (fails, with the modprobe), one it does not allow an
// unprivileged process (fails as such, but for root), and no proc file.
func TestCheckCongestion(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]string{
		"tcp_congestion_control":           "bbr\n",
		"tcp_available_congestion_control": "reno bbr cubic\n",
		"tcp_allowed_congestion_control":   "reno bbr\n",
	} {
		if err := os.WriteFile(dir+"/"+name, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cubic := StatusFail
	if os.Geteuid() == 0 {
		cubic = StatusOK // root may choose any algorithm the kernel has
	}
	for _, c := range []struct{ mode, status, msg, fix string }{
		{"auto", StatusOK, "bbr for peers on other hosts (the system's default), reno for peers on this host", ""},
		{"", StatusOK, "reno for peers on this host", ""},
		{"system", StatusOK, "bbr on every connection", ""},
		{"bbr", StatusOK, "bbr on every connection", ""},
		{"reno", StatusOK, "reno on every connection", ""},
		{"vegas", StatusFail, `tcp.congestion "vegas": the kernel has no such algorithm (available: reno bbr cubic)`, "modprobe tcp_vegas"},
		{"cubic", cubic, "cubic", ""},
	} {
		r := &Report{}
		checkCongestion(r, hostPaths{ipv4: dir}, c.mode)
		if len(r.Checks) != 1 || r.Checks[0].Check != "congestion" || r.Checks[0].Status != c.status ||
			!strings.Contains(r.Checks[0].Message, c.msg) || !strings.Contains(r.Checks[0].Fix, c.fix) {
			t.Errorf("tcp.congestion %q: %+v, want one congestion check, %s, saying %q, fix %q", c.mode, r.Checks, c.status, c.msg, c.fix)
		}
		if c.mode == "cubic" && cubic == StatusFail && !strings.Contains(r.Checks[0].Fix, "net.ipv4.tcp_allowed_congestion_control='reno bbr cubic'") {
			t.Errorf("cubic, not allowed: fix %q", r.Checks[0].Fix)
		}
	}
	r := &Report{}
	checkCongestion(r, hostPaths{ipv4: t.TempDir()}, "auto")
	if len(r.Checks) != 1 || r.Checks[0].Status != StatusSkip {
		t.Errorf("no proc files: %+v, want one skipped check", r.Checks)
	}
}

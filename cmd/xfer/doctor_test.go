package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/probe"
)

// noRDMA skips a test of the failing path on a host that has RDMA.
func noRDMA(t *testing.T) {
	t.Helper()
	if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
		t.Skip("this host has RDMA devices; the VM run covers doctor's passing path")
	}
}

// find returns the checks named check with the given status.
func find(r *doctorReport, check, status string) []checkResult {
	var out []checkResult
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
func TestDoctorWithoutRDMA(t *testing.T) {
	noRDMA(t)
	r := doctorHost(xfer.Config{MemoryMB: 64})
	var out bytes.Buffer
	r.print(&out)
	if r.Failed == 0 {
		t.Fatalf("doctor passed on a host without RDMA:\n%s", out.String())
	}
	wants := []struct{ check, status, fix string }{
		{"modules", statusFail, "modprobe -a ib_core ib_uverbs"},
		{"modules", statusFail, "rdma link add rxe0 type rxe netdev"},
		{"devices", statusFail, "rdma link add rxe0 type rxe netdev"},
		{"permissions", statusFail, "modprobe ib_uverbs"},
		{"rdma_cm", statusWarn, "modprobe -a rdma_cm rdma_ucm"},
	}
	if built, _ := probe.VerbsBuilt(); !built {
		// Without cgo the devices are not listed; the build is the fix.
		wants[2] = struct{ check, status, fix string }{"build", statusFail, "CGO_ENABLED=1 go build"}
	} else if probe.Verbs() != nil {
		// Without libibverbs the devices are not listed; installing it
		// is the fix.
		wants[2] = struct{ check, status, fix string }{"devices", statusFail, "install libibverbs first"}
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
		if (c.Status == statusFail || c.Status == statusWarn) && c.Fix == "" && c.Check != "hugepages" {
			t.Errorf("%s %s has no fix: %s", c.Status, c.Check, c.Message)
		}
		if c.Status == statusOK && c.Check != "build" && c.Check != "libibverbs" && c.Check != "memlock" && c.Check != "hugepages" && c.Check != "tcp" && c.Check != "shm" {
			t.Errorf("%s passed on a host without RDMA: %s", c.Check, c.Message)
		}
	}
	if len(find(r, "tcp", statusOK)) != 1 || len(find(r, "shm", statusOK)) != 1 {
		t.Errorf("tcp and shm are not reported working:\n%s", out.String())
	}
	if g := find(r, "gpu", statusSkip); len(g) != 1 || !strings.Contains(g[0].Message, "no GPU") {
		t.Errorf("the GPU check on a host without a GPU:\n%s", out.String())
	}
	s := out.String()
	if !strings.Contains(s, "[FAIL]") || !strings.Contains(s, "fix:") || !strings.Contains(s, "check(s) failed. tcp and shm work without RDMA") {
		t.Fatalf("failures are not marked with their fix:\n%s", s)
	}
}

func TestDevicesWithoutRDMA(t *testing.T) {
	var out bytes.Buffer
	printDevices(&out, nil)
	if !strings.Contains(out.String(), "No RDMA devices") {
		t.Fatalf("empty device list printed as %q", out.String())
	}
	if got := jsonDevices(nil); got == nil || len(got) != 0 {
		t.Fatalf("JSON of no devices: %#v, want an empty list", got)
	}
}

// TestDoctorSummaryOnce: the command prints its summary once, on stdout,
// and exits 1 without repeating it on stderr; --json prints the same
// checks as JSON and exits 1 too.
func TestDoctorSummaryOnce(t *testing.T) {
	if devs, err := probe.Devices(); err == nil && len(devs) > 0 {
		t.Skip("this host has RDMA devices; doctor may pass here")
	}
	o, e, code := xferRun(t, cleanEnv(), "doctor")
	if code != 1 || strings.Count(o+e, "check(s) failed") != 1 || e != "" {
		t.Fatalf("doctor: exit %d, stdout %q, stderr %q: want exit 1 and one summary, on stdout", code, o, e)
	}
	o, e, code = xferRun(t, cleanEnv(), "doctor", "--json")
	var r doctorReport
	if err := json.Unmarshal([]byte(o), &r); err != nil || code != 1 || e != "" {
		t.Fatalf("doctor --json: exit %d, %v, stdout %q, stderr %q", code, err, o, e)
	}
	check := "devices"
	if built, _ := probe.VerbsBuilt(); !built {
		check = "build"
	}
	if r.Failed == 0 || len(find(&r, check, statusFail)) == 0 || len(find(&r, "tcp", statusOK)) != 1 || find(&r, check, statusFail)[0].Fix == "" {
		t.Fatalf("doctor --json: %+v", r)
	}
}

// A user without CAP_IPC_LOCK whose memlock limit is below the pool is
// told so, with the fix.
func TestDoctorMemlock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run doctor as another user")
	}
	sh, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	bin := filepath.Join(t.TempDir(), "xfer")
	if data, err := os.ReadFile(xferBinary(t)); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `ulimit -l 64 && exec "$0" --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all "$1" doctor --memory-mb 128`, sh, bin)
	cmd.Env = cleanEnv()
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "[FAIL] memlock limit 64 KiB is below the 128 MiB pool") || !strings.Contains(string(out), "ulimit -l unlimited") {
		t.Fatalf("doctor as nobody with memlock 64 KiB:\n%s", out)
	}
}

// The GPU check on a host tree with an NVIDIA GPU: without nvidia-peermem
// it fails with the modprobe that fixes it; with it, it passes. The
// modules come from /proc/modules' format.
func TestDoctorGPU(t *testing.T) {
	h := hostPaths{procModules: "testdata/gpuhost/modules", sysModule: "testdata/gpuhost/none", pciDevices: "testdata/gpuhost/pci", devIB: "testdata/gpuhost/none"}
	loaded := loadedModules(h)
	for _, m := range []string{"nvidia", "mlx5_ib", "ib_core", "ib_uverbs"} {
		if !loaded[m] {
			t.Errorf("module %s not found in %s", m, h.procModules)
		}
	}
	r := &doctorReport{}
	checkGPU(r, h, loaded)
	if g := find(r, "gpu", statusFail); len(g) != 1 || !strings.Contains(g[0].Fix, "modprobe nvidia-peermem") || !strings.Contains(g[0].Message, "1 NVIDIA GPU") {
		t.Errorf("an NVIDIA GPU without nvidia-peermem: %+v", r.Checks)
	}
	h.procModules = "testdata/gpuhost/modules-peermem"
	r = &doctorReport{}
	checkGPU(r, h, loadedModules(h))
	if len(find(r, "gpu", statusOK)) != 1 {
		t.Errorf("an NVIDIA GPU with nvidia-peermem: %+v", r.Checks)
	}
}

// In the RDMA VM (make verbs-test), on rxe and on siw, the built xfer
// doctor passes: exit 0, the ACTIVE port, and the GID to use named (the
// RoCE v2 entry on rxe; on siw, iWARP over the netdev). The same with the
// production layout's config naming the device, and a config naming a
// device that is not there fails and says so.
func TestDoctorInVM(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if dev == "" {
		devs, err := probe.Devices()
		if err != nil || len(devs) == 0 {
			t.Fatalf("no devices: %v", err)
		}
		dev = devs[0].Name
	}
	o, e, code := xferRun(t, cleanEnv(), "doctor")
	t.Logf("xfer doctor on %s:\n%s%s", dev, o, e)
	if code != 0 || !strings.Contains(o, "All checks passed") {
		t.Fatalf("doctor on %s: exit %d", dev, code)
	}
	if !strings.Contains(o, "[ OK ] "+dev+" port 1 ACTIVE") {
		t.Errorf("no ACTIVE port of %s named", dev)
	}
	if strings.HasPrefix(dev, "siw") {
		if !strings.Contains(o, "[ OK ] "+dev+" port 1: iWARP over netdev") {
			t.Errorf("no iWARP netdev named for %s", dev)
		}
	} else if !strings.Contains(o, "[ OK ] "+dev+" port 1: RoCE v2 GID index ") || !strings.Contains(o, "is the one to use") {
		t.Errorf("no RoCE v2 GID named for %s", dev)
	}
	for _, want := range []string{"kernel modules loaded: ib_core, ib_uverbs", "rdma_cm available", "uverbs* can be opened read-write", "active MTU", "no GPU"} {
		if !strings.Contains(o, want) {
			t.Errorf("doctor on %s does not say %q", dev, want)
		}
	}
	cfg := writeConfig(t, "transport:\n  amst:\n    enable_rdma: true\n    rdma_device: "+dev+"\n    rdma_port: 1\n    rdma_qp_type: RC\nlog_level: info\n")
	o, e, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor", "--json")
	var r doctorReport
	if err := json.Unmarshal([]byte(o), &r); err != nil || code != 0 || r.Failed != 0 {
		t.Fatalf("doctor --json with the production config: exit %d, %v\n%s%s", code, err, o, e)
	}
	cfg = writeConfig(t, "transport:\n  amst:\n    rdma_device: "+dev+"\n    rdma_max_sge: 65536\n")
	o, _, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor")
	if code != 1 || !strings.Contains(o, "the configured rdma_max_sge 65536 is above "+dev+"'s max_sge") || !strings.Contains(o, "fix: set rdma_max_sge to ") {
		t.Fatalf("doctor with rdma_max_sge above the device's: exit %d\n%s", code, o)
	}
	cfg = writeConfig(t, "transport:\n  amst:\n    rdma_device: "+dev+"\n    rdma_max_send_wr: 65536\n")
	o, _, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor")
	if devs, _ := probe.Devices(); code != 1 && (len(devs) == 0 || devs[0].MaxQPWR < 65536) || code == 1 && !strings.Contains(o, "the configured rdma_max_send_wr 65536 is above "+dev+"'s max_qp_wr") {
		t.Errorf("doctor with rdma_max_send_wr 65536: exit %d\n%s", code, o)
	}
	cfg = writeConfig(t, "transport:\n  amst:\n    rdma_device: nosuch0\n")
	o, _, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor")
	if code != 1 || !strings.Contains(o, "the configured device nosuch0 does not exist here") {
		t.Fatalf("doctor with a device that is not there: exit %d\n%s", code, o)
	}
}

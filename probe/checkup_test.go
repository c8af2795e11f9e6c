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
		if c.Status == StatusOK && c.Check != "build" && c.Check != "libibverbs" && c.Check != "memlock" && c.Check != "hugepages" && c.Check != "tcp" && c.Check != "shm" {
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

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/probe"
)

// On a host without RDMA (this CI machine's kernel has none), doctor fails
// and says exactly how to fix it; it never crashes.
func TestDoctorWithoutRDMA(t *testing.T) {
	if ents, _ := os.ReadDir("/sys/class/infiniband"); len(ents) > 0 {
		t.Skip("this host has RDMA devices; the VM run covers doctor's passing path")
	}
	var out bytes.Buffer
	failed := doctor(&out, xfer.Config{MemoryMB: 64})
	if failed == 0 {
		t.Fatalf("doctor passed on a host without RDMA:\n%s", out.String())
	}
	s := out.String()
	if !strings.Contains(s, "rdma link add rxe0 type rxe netdev") && !strings.Contains(s, "apt-get install") {
		t.Fatalf("no fix for the missing device or library:\n%s", s)
	}
	if !strings.Contains(s, "[FAIL]") || !strings.Contains(s, "fix:") {
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
// and exits 1 without repeating it on stderr.
func TestDoctorSummaryOnce(t *testing.T) {
	if devs, err := probe.Devices(); err == nil && len(devs) > 0 {
		t.Skip("this host has RDMA devices; doctor may pass here")
	}
	o, e, code := xferRun(t, cleanEnv(), "doctor")
	if code != 1 || strings.Count(o+e, "check(s) failed") != 1 || e != "" {
		t.Fatalf("doctor: exit %d, stdout %q, stderr %q: want exit 1 and one summary, on stdout", code, o, e)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/probe"
)

// find returns the checks named check with the given status.
func find(r *probe.Report, check, status string) []probe.Check {
	var out []probe.Check
	for _, c := range r.Checks {
		if c.Check == check && c.Status == status {
			out = append(out, c)
		}
	}
	return out
}

// TestDoctorPrint: each check is printed with its status tag, a fix below
// a failure (its lines indented under it), and one summary.
func TestDoctorPrint(t *testing.T) {
	r := &probe.Report{Checks: []probe.Check{
		{Check: "tcp", Status: probe.StatusOK, Message: "tcp works"},
		{Check: "modules", Status: probe.StatusFail, Message: "no driver", Fix: "modprobe a\nor b"},
		{Check: "gpu", Status: probe.StatusSkip, Message: "no GPU"},
		{Check: "mtu", Status: probe.StatusWarn, Message: "small MTU"},
	}, Failed: 1, Warned: 1}
	var out bytes.Buffer
	printReport(&out, r)
	want := "[ OK ] tcp works\n[FAIL] no driver\n       fix: modprobe a\n            or b\n[SKIP] no GPU\n[WARN] small MTU\n" +
		"\n1 check(s) failed. tcp and shm work without RDMA; transport: auto uses them.\n"
	if out.String() != want {
		t.Errorf("printed:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	printReport(&out, &probe.Report{Checks: r.Checks[:1]})
	if !strings.HasSuffix(out.String(), "\nAll checks passed: the rdma transport can be used.\n") {
		t.Errorf("a report without failures printed as:\n%s", out.String())
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
	var r probe.Report
	if err := json.Unmarshal([]byte(o), &r); err != nil || code != 1 || e != "" {
		t.Fatalf("doctor --json: exit %d, %v, stdout %q, stderr %q", code, err, o, e)
	}
	check := "devices"
	if built, _ := probe.VerbsBuilt(); !built {
		check = "build"
	}
	if r.Failed == 0 || len(find(&r, check, probe.StatusFail)) == 0 || len(find(&r, "tcp", probe.StatusOK)) != 1 || find(&r, check, probe.StatusFail)[0].Fix == "" {
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

// vmDevice is testutil.RequireVerbs for a test that names its device:
// XFER_TEST_DEVICE, else the first device the verbs list.
func vmDevice(t *testing.T) string {
	t.Helper()
	dev := testutil.RequireVerbs(t)
	if dev == "" {
		devs, err := probe.Devices()
		if err != nil || len(devs) == 0 {
			t.Fatalf("no devices: %v", err)
		}
		dev = devs[0].Name
	}
	return dev
}

// In the RDMA VM (make verbs-test), on rxe and on siw, the built xfer
// doctor passes: exit 0, the ACTIVE port, and the GID to use named (the
// RoCE v2 entry on rxe; on siw, iWARP over the netdev). The same with the
// production layout's config naming the device, and a config naming a
// device that is not there fails and says so.
func TestDoctorInVM(t *testing.T) {
	dev := vmDevice(t)
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
	var r probe.Report
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

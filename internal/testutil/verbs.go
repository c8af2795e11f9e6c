package testutil

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Environment variables read by RequireVerbs and SkipOrFail.
const (
	// EnvRequireVerbs, when "1", turns every skip of SkipOrFail into a failure.
	EnvRequireVerbs = "XFER_REQUIRE_VERBS"
	// EnvTestDevice names the RDMA device to test on (rxe0, siw0, mlx5_0, ...).
	EnvTestDevice = "XFER_TEST_DEVICE"
	// EnvRDMAVM is set to 1 by tools/rdma-vm inside its guest.
	EnvRDMAVM = "RDMA_VM"
	// EnvTestAddr is the IP address of an RDMA netdev, which rdma_cm binds
	// and connects to.
	EnvTestAddr = "XFER_TEST_ADDR"
	// EnvRDMAVMIP is the guest's own address, which tools/rdma-vm sets; it
	// stands in for XFER_TEST_ADDR there.
	EnvRDMAVMIP = "RDMA_VM_IP"
)

// sysClassInfiniband is where the kernel lists RDMA devices; a variable so
// that the tests can point it at a directory of their own.
var sysClassInfiniband = "/sys/class/infiniband"

// hint tells a developer on a machine without RDMA how to run verbs tests.
const hint = "; run `make verbs-test` to test in a VM with rxe and siw"

// RequireVerbs returns the name of the RDMA device a test should use: the
// value of XFER_TEST_DEVICE, or "" when it is unset and the caller picks the
// first device it finds.
//
// It skips the test (or, with XFER_REQUIRE_VERBS=1, fails it; see SkipOrFail)
// when the environment has no RDMA: RDMA_VM is unset and
// /sys/class/infiniband does not exist or has no entries. It does the same
// when /sys/class/infiniband is empty inside the VM, and when
// XFER_TEST_DEVICE names a device that /sys/class/infiniband does not list.
func RequireVerbs(tb testing.TB) string {
	tb.Helper()
	dev := os.Getenv(EnvTestDevice)
	inVM := os.Getenv(EnvRDMAVM) != ""
	devs, err := verbsDevices()
	switch {
	case err != nil && !inVM:
		why := "no RDMA: " + EnvRDMAVM + " is unset and " + sysClassInfiniband + " does not exist"
		if !errors.Is(err, fs.ErrNotExist) {
			why = "no RDMA: " + EnvRDMAVM + " is unset and " + err.Error()
		}
		SkipOrFail(tb, why+hint)
		return ""
	case err == nil && len(devs) == 0:
		why := "no RDMA device: " + sysClassInfiniband + " has no entries"
		if inVM {
			why += " inside rdma-vm (was it started with --none, or did `rdma link add` fail?)"
		} else {
			why += " and " + EnvRDMAVM + " is unset" + hint
		}
		SkipOrFail(tb, why)
		return ""
	case err == nil && dev != "" && !slices.Contains(devs, dev):
		SkipOrFail(tb, EnvTestDevice+"="+dev+" is not in "+sysClassInfiniband+", which lists only "+strings.Join(devs, ", "))
		return ""
	}
	return dev
}

// RequireDevice is RequireVerbs for a test that must name its device:
// XFER_TEST_DEVICE, else the first device /sys/class/infiniband lists.
func RequireDevice(tb testing.TB) string {
	tb.Helper()
	if dev := RequireVerbs(tb); dev != "" {
		return dev
	}
	devs, _ := verbsDevices()
	if len(devs) == 0 {
		SkipOrFail(tb, "no RDMA device")
		return ""
	}
	return devs[0]
}

// RequireRDMAAddr returns the IP address rdma_cm tests bind and connect
// to: XFER_TEST_ADDR, else RDMA_VM_IP. Without either it skips the test (or
// fails it; see SkipOrFail); an address that does not parse fails it.
func RequireRDMAAddr(tb testing.TB) netip.Addr {
	tb.Helper()
	s := cmp.Or(os.Getenv(EnvTestAddr), os.Getenv(EnvRDMAVMIP))
	if s == "" {
		SkipOrFail(tb, "no IP address of an RDMA netdev for rdma_cm: set "+EnvTestAddr)
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		tb.Fatalf("%s / %s %q: %v", EnvTestAddr, EnvRDMAVMIP, s, err)
	}
	return a
}

// SkipOrFail skips the test with reason or, when XFER_REQUIRE_VERBS=1, fails
// it with "XFER_REQUIRE_VERBS=1 but <reason>". Like Skip and Fatal, it does
// not return: it ends the test's goroutine.
func SkipOrFail(tb testing.TB, reason string) {
	tb.Helper()
	if os.Getenv(EnvRequireVerbs) == "1" {
		tb.Fatalf("%s=1 but %s", EnvRequireVerbs, reason)
		return
	}
	tb.Skip(reason)
}

// verbsDevices lists the entries of /sys/class/infiniband, sorted.
func verbsDevices() ([]string, error) {
	ents, err := os.ReadDir(sysClassInfiniband)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// SoftLink returns what adding a software RDMA device again after deleting
// it takes (rdma link add DEV type TYP netdev NETDEV): its link type, rxe
// or siw, and its netdev, from `rdma -j link show`. A device that is not a
// software one, or whose netdev the tool does not name, is skipped (failed
// under XFER_REQUIRE_VERBS=1): a test that deletes it could not add it
// again.
func SoftLink(tb testing.TB, dev string) (typ, netdev string) {
	tb.Helper()
	out, err := exec.Command("rdma", "-j", "link", "show", dev+"/1").Output()
	var links []struct {
		Netdev string `json:"netdev"`
	}
	if err == nil {
		err = json.Unmarshal(out, &links)
	}
	if err != nil || len(links) == 0 || links[0].Netdev == "" {
		SkipOrFail(tb, fmt.Sprintf("rdma link show %s/1 names no netdev (%v: %s): the test deletes the device and must be able to add it again", dev, err, out))
	}
	for _, p := range []string{"rxe", "siw"} {
		if strings.HasPrefix(dev, p) {
			return p, links[0].Netdev
		}
	}
	SkipOrFail(tb, dev+" is not a software device (rxe or siw): the test deletes it and must be able to add it again")
	return "", ""
}

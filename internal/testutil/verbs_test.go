package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records Skip and Fatalf. Like the real ones, they end the calling
// goroutine, so run the code under test through (*fakeTB).run.
type fakeTB struct {
	testing.TB // only to satisfy the interface; never called
	mu         sync.Mutex
	skipped    string
	failed     string
	returned   bool // the function under test returned normally
	cleanups   []func()
}

// Cleanup records f; run calls the recorded functions, last first, once
// the code under test is done.
func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprint(args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// run calls fn(f) on its own goroutine and waits for it to return or exit.
func (f *fakeTB) run(fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
		f.mu.Lock()
		f.returned = true
		f.mu.Unlock()
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// env sets up a fake /sys/class/infiniband with the given devices (nil: the
// directory does not exist) and the three environment variables ("" unsets).
func env(t *testing.T, devs []string, rdmaVM, require, device string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "infiniband")
	if devs != nil {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := sysClassInfiniband
	sysClassInfiniband = dir
	t.Cleanup(func() { sysClassInfiniband = old })
	for k, v := range map[string]string{EnvRDMAVM: rdmaVM, EnvRequireVerbs: require, EnvTestDevice: device} {
		t.Setenv(k, v)
		if v == "" {
			os.Unsetenv(k) // t.Setenv restores the old value at cleanup
		}
	}
}

func TestRequireVerbs(t *testing.T) {
	tests := []struct {
		name            string
		devs            []string // nil: no /sys/class/infiniband
		rdmaVM, require string
		device          string
		want            string // returned device, when neither skipped nor failed
		skip, fail      string // substring of the reason, "" when not expected
	}{
		{name: "no sysfs, skip", skip: "RDMA_VM is unset and"},
		{name: "no sysfs, required", require: "1", fail: "XFER_REQUIRE_VERBS=1 but no RDMA: RDMA_VM is unset"},
		{name: "empty sysfs, skip", devs: []string{}, skip: "has no entries and RDMA_VM is unset"},
		{name: "empty sysfs, required", devs: []string{}, require: "1", fail: "XFER_REQUIRE_VERBS=1 but no RDMA device"},
		{name: "require=0 still skips", require: "0", skip: "no RDMA"},
		{name: "empty sysfs in VM, required", devs: []string{}, rdmaVM: "1", require: "1", fail: "inside rdma-vm"},
		{name: "device found", devs: []string{"rxe0", "siw0"}, device: "siw0", require: "1", want: "siw0"},
		{name: "no device named", devs: []string{"rxe0"}, want: ""},
		{name: "device missing, skip", devs: []string{"rxe0"}, device: "siw0", skip: "XFER_TEST_DEVICE=siw0 is not in"},
		{name: "device missing, required", devs: []string{"rxe0"}, device: "siw0", require: "1", fail: "XFER_REQUIRE_VERBS=1 but XFER_TEST_DEVICE=siw0 is not in %s, which lists only rxe0"},
		{name: "VM without sysfs trusts RDMA_VM", rdmaVM: "1", device: "rxe0", require: "1", want: "rxe0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env(t, tc.devs, tc.rdmaVM, tc.require, tc.device)
			f := &fakeTB{}
			var got string
			f.run(func(tb testing.TB) { got = RequireVerbs(tb) })
			fail := tc.fail
			if strings.Contains(fail, "%s") {
				fail = fmt.Sprintf(fail, sysClassInfiniband)
			}
			switch {
			case fail != "":
				if f.failed == "" || !strings.Contains(f.failed, fail) || f.skipped != "" || f.returned {
					t.Fatalf("want Fatalf containing %q; got failed=%q skipped=%q returned=%v", fail, f.failed, f.skipped, f.returned)
				}
			case tc.skip != "":
				if f.skipped == "" || !strings.Contains(f.skipped, tc.skip) || f.failed != "" || f.returned {
					t.Fatalf("want Skip containing %q; got skipped=%q failed=%q returned=%v", tc.skip, f.skipped, f.failed, f.returned)
				}
			default:
				if !f.returned || f.failed != "" || f.skipped != "" || got != tc.want {
					t.Fatalf("want %q returned; got %q returned=%v failed=%q skipped=%q", tc.want, got, f.returned, f.failed, f.skipped)
				}
			}
		})
	}
}

func TestSkipOrFail(t *testing.T) {
	for _, tc := range []struct {
		require  string
		wantSkip bool
	}{{"", true}, {"0", true}, {"yes", true}, {"1", false}} {
		t.Run("XFER_REQUIRE_VERBS="+tc.require, func(t *testing.T) {
			t.Setenv(EnvRequireVerbs, tc.require)
			f := &fakeTB{}
			f.run(func(tb testing.TB) { SkipOrFail(tb, "port 1 of rxe0 is down") })
			if f.returned {
				t.Fatal("SkipOrFail returned; it must end the goroutine like Skip and Fatal")
			}
			if tc.wantSkip {
				if f.skipped != "port 1 of rxe0 is down" || f.failed != "" {
					t.Fatalf("want a skip with the reason; got skipped=%q failed=%q", f.skipped, f.failed)
				}
				return
			}
			if want := "XFER_REQUIRE_VERBS=1 but port 1 of rxe0 is down"; f.failed != want || f.skipped != "" {
				t.Fatalf("want Fatalf %q; got failed=%q skipped=%q", want, f.failed, f.skipped)
			}
		})
	}
}

func TestRequireRDMAAddr(t *testing.T) {
	for _, tc := range []struct {
		addr, vmIP, require string
		want                string // the address returned, when neither skipped nor failed
		skip, fail          string // substring of the reason, "" when not expected
	}{
		{addr: "10.0.0.2", vmIP: "10.0.0.9", want: "10.0.0.2"},
		{vmIP: "fe80::1", want: "fe80::1"},
		{skip: "set XFER_TEST_ADDR"},
		{require: "1", fail: "XFER_REQUIRE_VERBS=1 but no IP address"},
		{addr: "rxe0", fail: `XFER_TEST_ADDR / RDMA_VM_IP "rxe0"`},
	} {
		t.Run(fmt.Sprintf("%q,%q,%q", tc.addr, tc.vmIP, tc.require), func(t *testing.T) {
			for k, v := range map[string]string{EnvTestAddr: tc.addr, EnvRDMAVMIP: tc.vmIP, EnvRequireVerbs: tc.require} {
				t.Setenv(k, v)
				if v == "" {
					os.Unsetenv(k)
				}
			}
			f := &fakeTB{}
			var got string
			f.run(func(tb testing.TB) { got = RequireRDMAAddr(tb).String() })
			switch {
			case tc.fail != "":
				if !strings.Contains(f.failed, tc.fail) || f.returned {
					t.Fatalf("want Fatalf containing %q; got failed=%q skipped=%q returned=%v", tc.fail, f.failed, f.skipped, f.returned)
				}
			case tc.skip != "":
				if !strings.Contains(f.skipped, tc.skip) || f.returned {
					t.Fatalf("want Skip containing %q; got skipped=%q failed=%q returned=%v", tc.skip, f.skipped, f.failed, f.returned)
				}
			case !f.returned || got != tc.want:
				t.Fatalf("want %s returned; got %q returned=%v failed=%q skipped=%q", tc.want, got, f.returned, f.failed, f.skipped)
			}
		})
	}
}

// TestRequireVerbsHere runs RequireVerbs for real. On a machine without RDMA
// it skips; under `make verbs-test` (XFER_REQUIRE_VERBS=1 inside rdma-vm) it
// checks that the device the VM was started with is there.
func TestRequireVerbsHere(t *testing.T) {
	dev := RequireVerbs(t)
	devs, err := verbsDevices()
	t.Logf("device %q; %s lists %v (err %v); RDMA_VM=%q", dev, sysClassInfiniband, devs, err, os.Getenv(EnvRDMAVM))
	if dev != "" {
		if _, err := os.Stat(filepath.Join(sysClassInfiniband, dev, "ports", "1", "state")); err != nil {
			t.Fatalf("device %s has no port 1: %v", dev, err)
		}
	}
}

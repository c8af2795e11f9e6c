//go:build cgo

package ibv

import (
	"errors"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/cabi/cabitest"
)

func TestLoad(t *testing.T) {
	err := Load()
	if err != nil {
		// A host without rdma-core: the error must say so and how to fix it.
		var le *LibraryError
		if !errors.Is(err, ErrNotSupported) || !errors.As(err, &le) || !strings.Contains(err.Error(), "apt-get install") {
			t.Fatalf("Load() = %v, want a LibraryError wrapping ErrNotSupported", err)
		}
		t.Skipf("libibverbs is not installed: %v", err)
	}
	if err2 := Load(); err2 != nil {
		t.Fatalf("second Load() = %v", err2)
	}
}

func TestLoadMissingLibrary(t *testing.T) {
	for _, c := range []struct {
		lib  string
		want []string
	}{
		{"libxfer-no-such-verbs.so.1", []string{"libxfer-no-such-verbs.so.1", "dlopen", "apt-get install rdma-core ibverbs-providers"}},
		// A library without the symbols: libc has no ibv_get_device_list.
		{"libc.so.6", []string{"has no symbol ibv_get_device_list@IBVERBS_1.1"}},
	} {
		err := tryLoad(c.lib)
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("tryLoad(%q) = %v, want ErrNotSupported", c.lib, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("tryLoad(%q) = %q, does not mention %q", c.lib, err, w)
			}
		}
	}
}

// TestNotLinked checks that the binary does not link libibverbs (or
// librdmacm, which the module does not use): libibverbs is opened at run
// time, so the binary starts without it.
func TestNotLinked(t *testing.T) { cabitest.NotLinked(t, "ibverbs", "rdmacm") }

// TestDevicesAnywhere runs everywhere: Devices and Open return a list or an
// error, never panic, and without devices Open's error wraps ErrNoDevice.
func TestDevicesAnywhere(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		if !errors.Is(err, ErrNotSupported) {
			t.Logf("Devices() = %v", err)
		}
	}
	t.Logf("%d devices", len(devs))
	for _, d := range devs {
		t.Logf("%s: %s %s, %d ports", d.Name, d.NodeType, d.Transport, len(d.Ports))
	}
	_, err = Open("xfer-no-such-device")
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, ErrNotSupported) {
		t.Errorf("Open(no such device) = %v, want ErrNoDevice", err)
	}
	if len(devs) == 0 && err != nil {
		_, err := Open("")
		if !errors.Is(err, ErrNoDevice) && Load() == nil {
			t.Errorf("Open(\"\") without devices = %v, want ErrNoDevice", err)
		}
	}
}

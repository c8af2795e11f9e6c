//go:build !cgo || !linux

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestNotAvailable checks that, in a build without CUDA, every entry point
// fails with ErrNotAvailable and says why.
func TestNotAvailable(t *testing.T) {
	if Built {
		t.Fatal("Built is true in a build without CUDA")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotAvailable) {
			t.Errorf("%s: %v, want ErrNotAvailable", what, err)
		} else if !strings.Contains(err.Error(), unsupportedReason) {
			t.Errorf("%s: %q does not say why", what, err)
		}
	}
	var u *UnavailableError
	if err := Load(); !errors.As(err, &u) || u.Fix == "" {
		t.Errorf("Load() = %v, want an *UnavailableError with a fix", err)
	}
	check("Load", Load())
	_, _, err := DriverVersion()
	check("DriverVersion", err)
	_, err = DeviceCount()
	check("DeviceCount", err)
	_, err = Devices()
	check("Devices", err)
	_, err = Retain(0)
	check("Retain", err)
	_, err = PointerAttributes(0)
	check("PointerAttributes", err)
	c := &Context{}
	_, err = c.Alloc(1)
	check("Alloc", err)
	check("Copy", c.Copy(0, 0, 1))
	_, err = c.DMABufFD(0, 4096)
	check("DMABufFD", err)
	_, err = c.NewStream()
	check("NewStream", err)
	var s *Stream
	check("CopyAsync", s.CopyAsync(0, 0, 1))
	var e *Event
	check("Record", e.Record(s))
	if c.Close() != nil || s.Close() != nil || e.Close() != nil {
		t.Error("Close failed")
	}
}

package cuda

import (
	"errors"
	"os"
	"testing"
)

// envRequireCUDA, when "1", turns requireCUDA's skip into a failure: the
// GPU machines run the tests with it, so that a broken driver setup cannot
// pass as a skipped run.
const envRequireCUDA = "XFER_REQUIRE_CUDA"

// requireCUDA skips the test when CUDA cannot be used here, or fails it
// when XFER_REQUIRE_CUDA=1.
func requireCUDA(tb testing.TB) {
	tb.Helper()
	err := Load()
	if err == nil {
		return
	}
	if os.Getenv(envRequireCUDA) == "1" {
		tb.Fatalf("%s=1 but %v", envRequireCUDA, err)
	}
	tb.Skipf("no CUDA: %v", err)
}

// TestLoad checks Load's answer wherever the tests run: success, or an
// *UnavailableError that matches ErrNotAvailable, says why and says what
// to do; and that every entry point then fails the same way.
func TestLoad(t *testing.T) {
	err := Load()
	if err == nil {
		major, minor, err := DriverVersion()
		if err != nil || major < 11 {
			t.Fatalf("DriverVersion() = %d.%d, %v after a successful Load", major, minor, err)
		}
		t.Logf("CUDA driver %d.%d", major, minor)
		if err := Load(); err != nil {
			t.Fatalf("second Load() = %v", err)
		}
		return
	}
	if os.Getenv(envRequireCUDA) == "1" {
		t.Errorf("%s=1 but Load() = %v", envRequireCUDA, err)
	}
	var u *UnavailableError
	if !errors.As(err, &u) || !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("Load() = %#v, want an *UnavailableError matching ErrNotAvailable", err)
	}
	if u.Reason == "" || u.Fix == "" {
		t.Errorf("Load() = %q: want a reason and a fix", err)
	}
	if !errors.Is(Load(), ErrNotAvailable) {
		t.Error("second Load() does not fail the same way")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotAvailable) {
			t.Errorf("%s = %v, want an error matching ErrNotAvailable", what, err)
		}
	}
	_, _, err = DriverVersion()
	check("DriverVersion()", err)
	_, err = DeviceCount()
	check("DeviceCount()", err)
	_, err = Devices()
	check("Devices()", err)
	c, err := Retain(0)
	check("Retain(0)", err)
	if c != nil {
		t.Error("Retain returned a Context with its error")
	}
	_, err = PointerAttributes(0x1000)
	check("PointerAttributes", err)
	t.Logf("Load() = %v", Load())
}

// TestNilClose checks that Close is nil-safe on every handle, and that
// other methods on nil handles fail instead of panicking.
func TestNilClose(t *testing.T) {
	var (
		c *Context
		s *Stream
		e *Event
	)
	for i := 0; i < 2; i++ {
		if err := c.Close(); err != nil {
			t.Errorf("(*Context)(nil).Close() = %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("(*Stream)(nil).Close() = %v", err)
		}
		if err := e.Close(); err != nil {
			t.Errorf("(*Event)(nil).Close() = %v", err)
		}
	}
	if c.Ordinal() != -1 {
		t.Errorf("(*Context)(nil).Ordinal() = %d, want -1", c.Ordinal())
	}
	if _, err := c.Alloc(1); err == nil {
		t.Error("(*Context)(nil).Alloc succeeded")
	}
	if err := s.Sync(); err == nil {
		t.Error("(*Stream)(nil).Sync succeeded")
	}
	if _, err := e.Done(); err == nil {
		t.Error("(*Event)(nil).Done succeeded")
	}
}

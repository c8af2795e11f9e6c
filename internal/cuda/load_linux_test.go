//go:build cgo && linux

package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/cabi/cabitest"
)

// TestLoadWithoutDriver checks Load's error on a host without
// libcuda.so.1 (the usual CI machine): it names the library and says how
// to install the driver.
func TestLoadWithoutDriver(t *testing.T) {
	if tryLoad(libCUDA) == nil {
		t.Skip("libcuda.so.1 is installed")
	}
	err := Load()
	var u *UnavailableError
	if !errors.As(err, &u) || !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("Load() = %v, want an *UnavailableError matching ErrNotAvailable", err)
	}
	if !strings.Contains(u.Reason, "libcuda.so.1") || !strings.Contains(u.Fix, "NVIDIA driver") {
		t.Errorf("Load() = %q: want the reason to name libcuda.so.1 and the fix the NVIDIA driver", err)
	}
	if !strings.HasPrefix(err.Error(), "CUDA is not available: libcuda.so.1") || !strings.Contains(err.Error(), "\nFix: ") {
		t.Errorf("Load().Error() = %q", err)
	}
	for what, err := range map[string]error{
		"Retain(0)":     second(Retain(0)),
		"Devices()":     second(Devices()),
		"DeviceCount()": second(DeviceCount()),
	} {
		if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "libcuda.so.1") {
			t.Errorf("%s = %v, want Load's error", what, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestTryLoad(t *testing.T) {
	for _, c := range []struct {
		lib  string
		want []string
	}{
		{"libxfer-no-such-cuda.so.1", []string{"libxfer-no-such-cuda.so.1 not found", "No such file", "NVIDIA driver"}},
		// A library without the symbols: libc has no cuInit.
		{"libc.so.6", []string{"libc.so.6 has no symbol cuInit"}},
	} {
		err := tryLoad(c.lib)
		var u *UnavailableError
		if !errors.As(err, &u) || !errors.Is(err, ErrNotAvailable) {
			t.Errorf("tryLoad(%q) = %v, want an *UnavailableError", c.lib, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("tryLoad(%q) = %q, does not mention %q", c.lib, err, w)
			}
		}
	}
}

// TestTryLoadFakeDriver loads stand-ins for libcuda.so.1 built here: one
// that reports an old driver, one that lacks the _v2 symbols.
func TestTryLoadFakeDriver(t *testing.T) {
	cc, err := cabitest.CC()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	build := func(name, src string) string {
		t.Helper()
		c := filepath.Join(dir, name+".c")
		so := filepath.Join(dir, name+".so")
		if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, c).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", name, err, out)
		}
		return so
	}
	old := build("old", "int cuDriverGetVersion(int *v) { *v = 10020; return 0; }\n")
	if err := tryLoad(old); !errors.Is(err, ErrNotAvailable) ||
		!strings.Contains(err.Error(), "driver 10.2 is older than 11.0, the oldest this package supports") {
		t.Errorf("tryLoad(driver 10.2) = %v", err)
	}
	partial := build("partial", "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\nint cuInit(unsigned f) { return 0; }\n")
	if err := tryLoad(partial); !errors.Is(err, ErrNotAvailable) ||
		!strings.Contains(err.Error(), "has no symbol cuGetErrorName (driver 12.4)") {
		t.Errorf("tryLoad(partial driver) = %v", err)
	}
}

func TestInitError(t *testing.T) {
	for code, want := range map[int]string{
		codeNoDevice:              `no CUDA device`,
		codeStubLibrary:           "stub library",
		codeSystemDriverMismatch:  "different driver versions",
		codeCompatNotSupportedDev: "forward-compatibility",
		999:                       "cuInit: CUDA_ERROR_UNKNOWN: unknown error",
	} {
		e := &Error{Op: "cuInit", Code: code, Name: "CUDA_ERROR_UNKNOWN", Msg: "unknown error"}
		err := initError(e)
		var u *UnavailableError
		if !errors.As(err, &u) || u.Err != e || u.Fix == "" || !errors.Is(err, ErrNotAvailable) {
			t.Errorf("initError(%d) = %#v", code, err)
			continue
		}
		if !strings.Contains(u.Reason, want) {
			t.Errorf("initError(%d).Reason = %q, want it to mention %q", code, u.Reason, want)
		}
	}
}

// TestNotLinked checks that the binary does not link libcuda: it is opened
// at run time, so the binary starts without it.
func TestNotLinked(t *testing.T) { cabitest.NotLinked(t, "libcuda", "libcudart") }

// cudaHeaderDirs are where TestABI looks for cuda.h.
func cudaHeaderDirs() []string {
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := os.Getenv(env); d != "" {
			dirs = append(dirs, filepath.Join(d, "include"))
		}
	}
	return append(dirs, "/usr/local/cuda/include", "/usr/include")
}

// TestABI checks every size and constant of abi_table.h, as the package's
// own cuda_abi.h declares them, against the system's cuda.h (CUDA 11.7 or
// newer), and the Go constants against cuda_abi.h. It compiles and runs a
// C program; without a C compiler or a CUDA toolkit's cuda.h it checks the
// Go side only. It needs no GPU.
func TestABI(t *testing.T) {
	cabitest.CheckConsts(t, abiGoConsts())
	cc, err := cabitest.CC()
	if err != nil {
		t.Skip(err)
	}
	var inc string
	for _, d := range cudaHeaderDirs() {
		if _, err := os.Stat(filepath.Join(d, "cuda.h")); err == nil {
			inc = d
			break
		}
	}
	if inc == "" {
		t.Skipf("no cuda.h in %v (a CUDA toolkit, or CUDA_HOME): cannot check cuda_abi.h", cudaHeaderDirs())
	}
	items := abiTable()
	prelude := "#include <stddef.h>\n#include <stdio.h>\n#include <cuda.h>\n" +
		"#if CUDA_VERSION < 11070\n#error cuda.h is older than CUDA 11.7\n#endif\n"
	if err := cabitest.CheckSystem(t, cc, t.TempDir(), prelude, []string{"-I", inc}, items, inc+"/cuda.h", "cuda_abi.h"); err != nil {
		if strings.Contains(err.Error(), "older than CUDA 11.7") {
			t.Skipf("%s/cuda.h is older than CUDA 11.7", inc)
		}
		t.Fatal(err)
	}
	t.Logf("checked %d sizes and constants against %s/cuda.h", len(items), inc)
}

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/xferio/xfer/internal/cuda"
	"github.com/xferio/xfer/internal/testmain"
)

// EnvRequireCUDA, when "1" (as tools/gpu/check.sh sets it on a GPU
// machine), turns RequireCUDA's skip into a failure, so that a driver or a
// binding that cannot reach the GPU there cannot pass as a skip.
const EnvRequireCUDA = "XFER_REQUIRE_CUDA"

// RequireCUDA skips a test that needs a CUDA GPU where the driver does not
// load or sees none, saying why, and fails it instead under
// XFER_REQUIRE_CUDA=1.
func RequireCUDA(tb testing.TB) {
	tb.Helper()
	err := cuda.Load()
	if err == nil {
		var n int
		if n, err = cuda.DeviceCount(); err == nil && n > 0 {
			return
		}
	}
	reason := "needs a CUDA GPU"
	if err != nil {
		reason += ": " + err.Error()
	}
	if os.Getenv(EnvRequireCUDA) == "1" {
		tb.Fatalf("%s=1 but %s", EnvRequireCUDA, reason)
		return
	}
	tb.Skip(reason)
}

// EnvNoFakeCUDA, when "1", keeps UseFakeCUDA from loading the stand-in
// driver: for a child test process that checks what a host without CUDA
// says.
const EnvNoFakeCUDA = "XFER_NO_FAKE_CUDA"

var fakeInUse bool

// FakeCUDAInUse reports whether UseFakeCUDA loaded the stand-in driver.
func FakeCUDAInUse() bool { return fakeInUse }

// UseFakeCUDA, on a machine without the NVIDIA driver, builds the stand-in
// driver of internal/cuda/testdata/fakecuda.c with gcc and makes the CUDA
// binding load it, so that the GPU tests run there too: its "device
// memory" faults when the CPU touches it, as a GPU's does. It does nothing
// where the driver is present, under XFER_REQUIRE_CUDA=1 (the GPU
// machine's run) or XFER_NO_FAKE_CUDA=1, or where gcc fails (the GPU tests
// then skip, saying why). Call it from TestMain before any test, and call
// the cleanup it returns once they are done.
func UseFakeCUDA() (cleanup func()) {
	cleanup = func() {}
	if os.Getenv(EnvRequireCUDA) == "1" || os.Getenv(EnvNoFakeCUDA) == "1" || cuda.HasDriver() {
		return cleanup
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return cleanup
	}
	src := filepath.Join(filepath.Dir(self), "..", "cuda", "testdata", "fakecuda.c")
	dir, err := os.MkdirTemp("", "xfer-fakecuda-")
	if err != nil {
		return cleanup
	}
	lib := filepath.Join(dir, "libcuda-fake.so")
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", lib, src).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testutil: the stand-in CUDA driver did not build, GPU tests will skip: %v\n%s", err, out)
		os.RemoveAll(dir)
		return cleanup
	}
	cuda.SetLibrary(lib)
	fakeInUse = true
	return func() { os.RemoveAll(dir) }
}

// RunWithCUDA is the TestMain of a package with GPU tests: testmain.Run,
// with the GPU tests against the stand-in driver where the NVIDIA driver
// is missing (UseFakeCUDA), and the driver's own descriptors exempt from
// the leak check (CUDADriverFDs).
func RunWithCUDA(m *testing.M) {
	testmain.Run(m, testmain.After(UseFakeCUDA()), CUDADriverFDs())
}

// CUDADriverFDs exempts from testmain's descriptor check those that the
// CUDA driver opens for the life of the process (see cuda.DriverFD), for
// packages whose tests may load it.
func CUDADriverFDs() testmain.Option {
	return testmain.IgnoreFD("the CUDA driver keeps descriptors of its own for the life of the process (GPU tests)", cuda.DriverFD)
}

package testutil

import (
	"os"
	"testing"

	"github.com/xferio/xfer/internal/cuda"
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

package xfer_test

import (
	"os"
	"testing"

	"github.com/xferio/xfer/internal/cuda"
	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testutil"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor behind.
// Without a GPU, the GPU tests run against the stand-in driver
// (testutil.UseFakeCUDA).
func TestMain(m *testing.M) {
	cleanup := testutil.UseFakeCUDA()
	code := testmain.Main(m, testmain.IgnoreFD("the CUDA driver keeps descriptors of its own for the life of the process (GPU tests)", cuda.DriverFD))
	cleanup()
	os.Exit(code)
}

package xfer_test

import (
	"testing"

	"github.com/xferio/xfer/internal/cuda"
	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor behind.
func TestMain(m *testing.M) {
	testmain.Run(m, testmain.IgnoreFD("the CUDA driver keeps descriptors of its own for the life of the process (GPU tests)", cuda.DriverFD))
}

package cuda

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor (a DMA-BUF) behind. The driver is loaded first: cuInit opens
// descriptors that it keeps for the life of the process, and opened before
// the run they are not leaks. Contexts open more of the GPU's device files,
// which the driver may cache after the last context is released.
func TestMain(m *testing.M) {
	_ = Load()
	testmain.Run(m, testmain.IgnoreFD("the CUDA driver keeps descriptors of its own for the life of the process", DriverFD))
}

package ibv_test

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testmain/rdmaleak"
)

// TestMain fails the run when a test leaks a goroutine, a file descriptor,
// a verbs object (see ibv.Live), or an rdma_cm object of the connections
// that cm_linux_test.go makes for iWARP pairs. It is in the external test
// package so that it may import rdmaleak, which imports ibv.
func TestMain(m *testing.M) { testmain.Run(m, rdmaleak.Checks()...) }

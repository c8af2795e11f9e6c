package rdmacm_test

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testmain/rdmaleak"
)

// TestMain fails the run when a test leaves a goroutine, a file descriptor,
// an rdma_cm object (channel, ID, removal watch) or a verbs object behind.
// It is in the external test package so that it may import rdmaleak, which
// imports rdmacm.
func TestMain(m *testing.M) { testmain.Run(m, rdmaleak.Checks()...) }

package rails_test

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
	"github.com/xferio/xfer/internal/testmain/rdmaleak"
)

// TestMain fails the run when a test leaves a goroutine, a file descriptor,
// or any verbs or rdma_cm object behind.
func TestMain(m *testing.M) { testmain.Run(m, rdmaleak.Checks()...) }

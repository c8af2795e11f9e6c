package mastersrv

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if a goroutine or a file descriptor is
// left behind.
func TestMain(m *testing.M) { testmain.Run(m) }

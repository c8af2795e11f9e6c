package sys

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor (a memfd, pidfd, eventfd or socket) behind.
func TestMain(m *testing.M) { testmain.Run(m) }

package tcp_test

import (
	"testing"

	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor behind.
func TestMain(m *testing.M) { testmain.Run(m) }

package stage

import (
	"testing"

	"github.com/xferio/xfer/internal/testutil"
)

// TestMain fails the package's tests if they leave a goroutine or a file
// descriptor behind; without the NVIDIA driver it loads the stand-in
// driver (testutil.UseFakeCUDA).
func TestMain(m *testing.M) { testutil.RunWithCUDA(m) }

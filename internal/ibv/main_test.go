package ibv_test

import (
	"fmt"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the run when a test leaks a goroutine, a file descriptor,
// a verbs object (see ibv.Live), or an rdma_cm object of the connections
// that cm_linux_test.go makes for iWARP pairs. It is in the external test
// package so that it may import internal/rdmacm, which imports ibv.
func TestMain(m *testing.M) {
	testmain.Run(m,
		testmain.Check("leaked verbs objects", func() error {
			if live := ibv.Live(); !live.IsZero() {
				return fmt.Errorf("%v", live)
			}
			return nil
		}),
		testmain.Check("leaked rdma_cm objects", func() error {
			if live := rdmacm.Live(); !live.IsZero() {
				return fmt.Errorf("%v", live)
			}
			return nil
		}))
}

package rdmacm

import (
	"fmt"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the run when a test leaves a goroutine, a file descriptor,
// an rdma_cm object (channel, ID, removal watch) or a verbs object behind.
func TestMain(m *testing.M) {
	testmain.Run(m,
		testmain.Check("leaked rdma_cm objects", func() error {
			if live := Live(); !live.IsZero() {
				return fmt.Errorf("%v", live)
			}
			return nil
		}),
		testmain.Check("leaked verbs objects", func() error {
			if live := ibv.Live(); !live.IsZero() {
				return fmt.Errorf("%v", live)
			}
			return nil
		}))
}

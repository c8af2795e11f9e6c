package verbs_test

import (
	"fmt"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the run when a test leaves a goroutine, a file descriptor,
// or any verbs or rdma_cm object (context, PD, MR, CQ, QP, channel, CM ID,
// removal watch) behind.
func TestMain(m *testing.M) {
	testmain.Run(m, testmain.Check("leaked verbs objects", func() error {
		if live := ibv.Live(); !live.IsZero() {
			return fmt.Errorf("%v", live)
		}
		return nil
	}), testmain.Check("leaked rdma_cm objects", func() error {
		if live := rdmacm.Live(); !live.IsZero() {
			return fmt.Errorf("%v", live)
		}
		return nil
	}))
}

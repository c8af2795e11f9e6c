package rdmacm

import (
	"fmt"
	"time"

	"github.com/xferio/xfer/internal/ibv"
)

var (
	// ErrNotSupported means rdma_cm cannot be used here: no rdma_ucm module,
	// no RDMA device with the address, or not Linux. It is the module's one
	// not-supported sentinel (internal/sys's, through ibv).
	ErrNotSupported = ibv.ErrNotSupported
	// ErrClosed is returned by calls on a Channel or ID after its Close. It
	// is ibv.ErrClosed, and matches net.ErrClosed.
	ErrClosed = ibv.ErrClosed
)

// errUnsupported says that op needs what this build or platform lacks.
func errUnsupported(op string) error {
	return fmt.Errorf("%s: %w: the kernel's rdma_cm is only available on Linux", op, ErrNotSupported)
}

// timeoutMS is a resolve timeout in milliseconds; 0 or less means 2 s.
func timeoutMS(d time.Duration) int {
	if d <= 0 {
		return 2000
	}
	return int(min(d.Milliseconds(), 1<<30))
}

package removal_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/xferio/xfer/internal/ibv"
)

// TestMain fails the run when a test leaves a goroutine, or any verbs
// object, behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if live := ibv.Live(); !live.IsZero() {
			fmt.Fprintf(os.Stderr, "leaked verbs objects: %+v\n", live)
			code = 1
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

package ibv

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaks a verbs object (see Live) or a
// goroutine.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if c := Live(); !c.IsZero() {
			fmt.Fprintf(os.Stderr, "FAIL: verbs objects leaked: %v\n", c)
			code = 1
		}
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines leaked: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

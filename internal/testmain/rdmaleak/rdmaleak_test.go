package rdmaleak

import (
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/rdmacm"
	"github.com/xferio/xfer/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m, Checks()...) }

// TestLeaked: zero counts pass, and any live object fails with the counts
// in the error.
func TestLeaked(t *testing.T) {
	if err := leaked(ibv.Counts{}); err != nil {
		t.Errorf("no verbs objects: %v", err)
	}
	if err := leaked(rdmacm.Counts{}); err != nil {
		t.Errorf("no rdma_cm objects: %v", err)
	}
	if err := leaked(ibv.Counts{QPs: 2}); err == nil || !strings.Contains(err.Error(), "qps=2") {
		t.Errorf("two live QPs: %v, want them counted", err)
	}
	if err := leaked(rdmacm.Counts{IDs: 1}); err == nil || !strings.Contains(err.Error(), "ids=1") {
		t.Errorf("a live CM ID: %v, want it counted", err)
	}
}

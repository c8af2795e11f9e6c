package shm_test

import (
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/xfertest"
)

func TestConformance(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicySHM})
}

// Under auto, two engines on one host pick shm.
func TestConformanceAuto(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyAuto, Want: "shm"})
}

package shm_test

import (
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/shm"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/xfertest"
)

func TestConformance(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicySHM})
}

// Under auto, two engines on one host pick shm.
func TestConformanceAuto(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyAuto, Want: "shm"})
}

// The transport contract alone, without engines: memfd-backed regions, so
// that one-sided operations are copies through the mapped peer memory.
func TestTransport(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newSHM, Config: transporttest.PairConfig{Memfd: true}})
}

// Regions without a memfd take the stream path, served by the peer.
func TestTransportPrivateMemory(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newSHM})
}

func newSHM(testing.TB) transport.Transport { return shm.New() }

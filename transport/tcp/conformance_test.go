package tcp_test

import (
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/tcp"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/xfertest"
)

func TestConformance(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyTCP})
}

func TestConformanceOneConn(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyTCP, Config: xfer.Config{TCP: tcp.Config{Conns: 1}}})
}

// With memfd memory, WRITEs of 64 KiB or more leave by reference (sendfile).
func TestConformanceMemfd(t *testing.T) {
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyTCP, Config: xfer.Config{Memory: "memfd"}})
}

// The transport contract alone, without engines, over three connections
// (the engine's default): large operations spread over the extra two.
func TestTransport(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newTCP, Config: transporttest.PairConfig{Conns: 3}})
}

func TestTransportOneConn(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newTCP, Config: transporttest.PairConfig{Conns: 1}})
}

// With memfd-backed regions, WRITEs of 64 KiB or more leave by reference.
func TestTransportMemfd(t *testing.T) {
	transporttest.Run(t, transporttest.Options{New: newTCP, Config: transporttest.PairConfig{Memfd: true, Conns: 2}})
}

func newTCP(testing.TB) transport.Transport { return tcp.New() }

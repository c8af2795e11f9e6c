package tcp_test

import (
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport/tcp"
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

package verbs_test

import (
	"context"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// On real verbs (the VM's rxe0), the rdma transport passes the same
// conformance suite as tcp and shm.
func TestConformance(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyRDMA, Want: "rdma", Config: xfer.Config{RDMA: verbs.Config{Device: dev}}, NoNotifyAddress: true})
}

// Under auto, two engines that both have a usable device pick rdma.
func TestAutoPicksRDMA(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyAuto, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	if got := p.Peer.Transport(); got != "rdma" {
		t.Fatalf("auto picked %q with %s available", got, dev)
	}
	_ = context.Background()
}

// rdma_cm connection setup works on RoCE too (iWARP always uses it).
func TestConformanceCM(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyRDMA, Want: "rdma", Config: xfer.Config{RDMA: verbs.Config{Device: dev, UseCM: true}}, NoNotifyAddress: true})
}

// With a shared receive queue (rdma_use_srq) and with completion pollers
// that sleep on the completion channel (rdma_use_event_channel: true; the
// other runs busy-poll, the default).
func TestConformanceSRQEvents(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	xfertest.Run(t, xfertest.Options{Policy: xfer.PolicyRDMA, Want: "rdma", NoNotifyAddress: true,
		Config: xfer.Config{RDMA: verbs.Config{Device: dev, UseSRQ: true, UseEventChannel: true}}})
}

// The transport contract alone, without engines, on real verbs: on rxe the
// QPs are connected by the transport's own exchange, on siw (iWARP)
// through rdma_cm. (TestConformanceCM runs rdma_cm on rxe, through
// engines.)
func TestTransport(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	cfg := verbs.Config{Device: dev} // GID index: automatic
	transporttest.Run(t, transporttest.Options{New: func(testing.TB) transport.Transport { return verbs.New(cfg, nil) }, NoNotifyAddress: true, StaleAccessFails: true})
}

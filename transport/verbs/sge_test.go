package verbs_test

import (
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/verbs"
)

// max_sge is each QP's max_send_sge: at the device's max_sge the QPs are
// created with it, and above it the transport is unavailable and says why,
// naming the key and the device's limit.
func TestMaxSGE(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	probe := verbs.New(verbs.Config{Device: dev}, nil)
	limit := verbs.DeviceMaxSGE(probe)
	probe.Close()
	if limit < 1 {
		t.Fatalf("%s reports max_sge %d", dev, limit)
	}
	over := verbs.New(verbs.Config{Device: dev, MaxSGE: limit + 1}, nil)
	err := over.Available()
	over.Close()
	if err == nil || !strings.Contains(err.Error(), "rdma.max_sge") || !strings.Contains(err.Error(), "allows at most") {
		t.Fatalf("max_sge %d on %s (max_sge %d): %v, want a refusal that names the key and the limit", limit+1, dev, limit, err)
	}
	var sides []*verbs.Transport
	p := transporttest.NewPair(t, func(testing.TB) transport.Transport {
		tr := verbs.New(verbs.Config{Device: dev, MaxSGE: limit}, nil)
		sides = append(sides, tr)
		return tr
	}, transporttest.PairConfig{})
	_ = p
	for _, tr := range sides {
		sges := verbs.SendSGE(tr)
		if len(sges) == 0 {
			t.Fatal("no QPs")
		}
		for _, n := range sges {
			if n < limit {
				t.Errorf("a QP has max_send_sge %d; max_sge asked for %d", n, limit)
			}
		}
	}
	t.Logf("%s: max_sge %d, QPs created with it", dev, limit)
}

package status

import (
	"testing"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport/twin"
)

func TestParts(t *testing.T) {
	tw := twin.New()
	if ts := TransportOf(tw, tw.Caps(), "auto"); !ts.Available || ts.Reason != "" || ts.Name != tw.Name() {
		t.Errorf("under auto: %+v", ts)
	}
	if ts := TransportOf(tw, tw.Caps(), "tcp"); !ts.Available || ts.Reason != "not used: the policy is tcp" {
		t.Errorf("under tcp: %+v", ts)
	}
	if p := PoolOf(mem.PoolStats{Capacity: 8, InUse: 3}, mem.CUDA(1)); p.Capacity != 8 || p.Used != 3 || p.Memory != "cuda:1" {
		t.Errorf("pool: %+v", p)
	}
	staging := func() (uint64, uint64, bool) { return 4, 2, true }
	if g := GPUOf([]mem.Location{mem.Host}, staging); g != nil {
		t.Errorf("no GPU opened: %+v", g)
	}
	if g := GPUOf([]mem.Location{mem.CUDA(0), mem.CUDA(2)}, staging); g == nil || len(g.Devices) != 2 || g.Devices[1] != 2 || g.StagingBytes != 4 || !g.StagingPinned {
		t.Errorf("two GPUs: %+v", g)
	}
}

package status

import (
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// TransportOf is the status of transport t under policy ("auto" or a
// transport's name): whether it is available here and, when not, why, or
// why the policy leaves it out; its caps and the devices it has open.
func TransportOf(t transport.Transport, caps transport.Caps, policy string) Transport {
	ts := Transport{Name: t.Name(), Available: true, Caps: caps}
	if err := t.Available(); err != nil {
		ts.Available, ts.Reason = false, err.Error()
	} else if policy != "auto" && t.Name() != policy {
		ts.Reason = "not used: the policy is " + policy
	}
	d := t.Devices()
	ts.Device, ts.Rails = d.InUse, d.Rails
	return ts
}

// PoolOf is the status of a pool with stats s, whose memory is at loc.
func PoolOf(s mem.PoolStats, loc mem.Location) Pool {
	return Pool{Capacity: s.Capacity, Used: s.InUse, Free: s.Free, LargestFree: s.LargestFree,
		Fragmentation: s.Fragmentation, Allocated: s.Allocated, Failures: s.Failures, Memory: loc.String()}
}

// GPUOf is the GPU part of the status of an engine that opened the
// devices opened, or nil before it opened a GPU; staging returns its
// staging memory's size, the part in use, and whether it is pinned.
func GPUOf(opened []mem.Location, staging func() (size, used uint64, pinned bool)) *GPU {
	var devs []int
	for _, l := range opened {
		if l.Kind == mem.KindCUDA {
			devs = append(devs, l.Device)
		}
	}
	if len(devs) == 0 {
		return nil
	}
	g := &GPU{Devices: devs}
	g.StagingBytes, g.StagingUsedBytes, g.StagingPinned = staging()
	return g
}

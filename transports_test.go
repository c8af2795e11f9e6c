package xfer_test

import (
	"slices"
	"testing"

	"github.com/xferio/xfer"
)

// TestTransportCaps: every transport of the table has its capabilities,
// and the services that choose by them (kv's inline limits, the pages
// benchmark's pipelines) pick the transports they picked by name before.
func TestTransportCaps(t *testing.T) {
	var direct, maps []string
	for _, name := range xfer.TransportNames() {
		c, ok := xfer.TransportCaps(name)
		if !ok {
			t.Fatalf("TransportCaps(%q): not known, though TransportNames lists it", name)
		}
		if !c.OwnerServes() {
			direct = append(direct, name)
		}
		if c.MapsMemory {
			maps = append(maps, name)
		}
	}
	if want := []string{"rdma", "shm"}; !slices.Equal(direct, want) {
		t.Errorf("transports whose one-sided transfers skip the owner's engine: %v, want %v", direct, want)
	}
	if want := []string{"shm"}; !slices.Equal(maps, want) {
		t.Errorf("transports that map the peer's memory: %v, want %v", maps, want)
	}
	if _, ok := xfer.TransportCaps("carrier-pigeon"); ok {
		t.Error("TransportCaps knows a transport outside the table")
	}
}

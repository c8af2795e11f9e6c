package verbs

import (
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/ibv"
)

func gid(idx int, typ string, v4, ll bool) ibv.GIDInfo {
	g := ibv.GIDInfo{Index: idx, Type: typ, IPv4Mapped: v4, LinkLocal: ll}
	g.GID[0] = byte(idx + 1)
	return g
}

// The GID choice prefers a routable GID: RoCE v2 IPv4-mapped first, never a
// link-local GID on RoCE, the port GID on InfiniBand, or the configured index.
func TestPickGID(t *testing.T) {
	dev := ibv.DeviceInfo{Name: "rxe0"}
	roce := ibv.PortInfo{Num: 1, LinkLayer: "Ethernet", GIDs: []ibv.GIDInfo{
		gid(0, "RoCE v2", false, true), gid(1, "RoCE v2", true, false), gid(2, "RoCE v1", true, false), gid(3, "RoCE v2", false, false)}}
	if g, err := pickGID(dev, roce, -1); err != nil || g.Index != 1 {
		t.Fatalf("RoCE: picked %d, %v; want the RoCE v2 IPv4-mapped GID 1", g.Index, err)
	}
	noV4 := ibv.PortInfo{Num: 1, LinkLayer: "Ethernet", GIDs: []ibv.GIDInfo{gid(0, "RoCE v2", false, true), gid(3, "RoCE v2", false, false)}}
	if g, err := pickGID(dev, noV4, -1); err != nil || g.Index != 3 {
		t.Fatalf("RoCE without IPv4: picked %d, %v; want the routable RoCE v2 GID 3", g.Index, err)
	}
	onlyLL := ibv.PortInfo{Num: 1, LinkLayer: "Ethernet", GIDs: []ibv.GIDInfo{gid(0, "RoCE v2", false, true), gid(1, "RoCE v1", false, true)}}
	if _, err := pickGID(dev, onlyLL, -1); err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("only link-local GIDs: %v, want a refusal that says why", err)
	}
	if _, err := pickGID(dev, ibv.PortInfo{Num: 1, LinkLayer: "Ethernet"}, -1); err == nil || !strings.Contains(err.Error(), "no GIDs") {
		t.Fatalf("no GIDs: %v, want a refusal that says so", err)
	}
	// siw's one GID is its netdev's MAC, which ibv never calls link-local.
	siw := ibv.PortInfo{Num: 1, LinkLayer: "Ethernet", GIDs: []ibv.GIDInfo{gid(0, "iWARP", false, false)}}
	if g, err := pickGID(ibv.DeviceInfo{Name: "siw0", Transport: "iWARP"}, siw, -1); err != nil || g.Index != 0 {
		t.Fatalf("iWARP: picked %d, %v; want its one GID", g.Index, err)
	}
	ib := ibv.PortInfo{Num: 1, LinkLayer: "InfiniBand", GIDs: []ibv.GIDInfo{gid(0, "IB", false, true), gid(1, "IB", false, false)}}
	if g, err := pickGID(dev, ib, -1); err != nil || g.Index != 0 {
		t.Fatalf("InfiniBand: picked %d, %v; want the port GID 0", g.Index, err)
	}
	if g, err := pickGID(dev, roce, 2); err != nil || g.Index != 2 {
		t.Fatalf("configured index: picked %d, %v", g.Index, err)
	}
	if _, err := pickGID(dev, roce, 9); err == nil {
		t.Fatal("a configured index that does not exist was accepted")
	}
}

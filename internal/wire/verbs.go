package wire

import (
	"fmt"
	"net"
)

// VerbsInfo is what the rdma transport's two sides tell each other to
// connect their queue pairs: which device, port and GID they use, their
// MTU, and their QP numbers and starting PSNs. It travels over the
// handshaken connection right after the Welcome.
type VerbsInfo struct {
	Device    string
	Port      uint8
	LinkLayer uint8 // 1 InfiniBand, 2 Ethernet (RoCE)
	GIDIndex  uint8
	MTU       uint16 // active MTU in bytes
	LID       uint16
	GID       [16]byte
	QPNs      []uint32
	PSNs      []uint32
	RecvDepth uint32 // receive WQEs posted per QP for SEND and WRITE_WITH_IMM
	MaxInline uint32
	// CM asks for connection setup through rdma_cm (iWARP needs it). The
	// side that listens fills in IP and CMPort.
	CM     bool
	IP     [16]byte
	CMPort uint16
	// Keys (version 2) are the rkeys of the regions the sender's engine
	// exports, so that the peer's first WRITE or READ to one needs no
	// attach round trip. Regions not listed are attached on first use.
	Keys []RegionKey
	// RailGIDs (version 3) are, in the handshake blob, the GIDs of the
	// sender's other devices (rails) after the one this VerbsInfo
	// describes: it connects a peer over 1+len(RailGIDs) rails, and each
	// rail's QP exchange must name the GID given here (the peer's
	// allowed_gids checked them all).
	RailGIDs [][16]byte
	// Version is the encoding's version: 0 encodes the least one that
	// carries v's fields (3 with RailGIDs, else 2). Version 1 has
	// no Keys; a side sends it to a peer whose handshake blob says it
	// knows no more. A single-device engine's blob stays version 2, which
	// engines from before rails decode.
	Version uint8
}

// RegionKey is an exported region as the rdma transport addresses it.
type RegionKey struct {
	ID     uint32
	Access uint8 // bit 0 read, bit 1 write
	Base   uint64
	Len    uint64
	Key    uint64
	RKey   uint32
}

// Link layers.
const (
	LinkIB       = 1
	LinkEthernet = 2
)

// MaxQPs bounds VerbsInfo.QPNs.
const MaxQPs = 64

// MaxRails bounds the rails a VerbsInfo names: 1+len(RailGIDs).
const MaxRails = 16

// VerbsInfo encoding versions: 1 had no rkeys; 2 (VerbsInfoVersionKeys)
// adds Keys; 3 adds Rails. Decoders accept all three.
const (
	VerbsInfoVersion      = 3
	VerbsInfoVersionKeys  = 2
	verbsInfoVersionMin   = 1
	verbsInfoVersionRails = 3
)

// AppendVerbsInfo appends v's encoding (with a handshake header of type
// MsgVerbs) to b.
func AppendVerbsInfo(b []byte, v *VerbsInfo) []byte {
	e, at := begin(b, MsgVerbs)
	ver := v.Version
	if ver == 0 {
		ver = verbsInfoVersionRails - 1
		if len(v.RailGIDs) > 0 {
			ver = verbsInfoVersionRails
		}
	}
	e.u8(ver)
	e.str(v.Device)
	e.u8(v.Port)
	e.u8(v.LinkLayer)
	e.u8(v.GIDIndex)
	e.u16(v.MTU)
	e.u16(v.LID)
	e.raw(v.GID[:])
	e.u8(uint8(len(v.QPNs)))
	for i := range v.QPNs {
		e.u32(v.QPNs[i])
		e.u32(v.PSNs[i])
	}
	e.u32(v.RecvDepth)
	e.u32(v.MaxInline)
	e.u8(boolByte(v.CM))
	e.raw(v.IP[:])
	e.u16(v.CMPort)
	if ver >= VerbsInfoVersionKeys {
		e.u16(uint16(min(len(v.Keys), MaxExports)))
		for _, k := range v.Keys[:min(len(v.Keys), MaxExports)] {
			e.u32(k.ID)
			e.u8(k.Access)
			e.u64(k.Base)
			e.u64(k.Len)
			e.u64(k.Key)
			e.u32(k.RKey)
		}
	}
	if ver >= verbsInfoVersionRails {
		n := min(len(v.RailGIDs), MaxRails-1)
		e.u8(uint8(n))
		for _, g := range v.RailGIDs[:n] {
			e.raw(g[:])
		}
	}
	return finish(e, at)
}

// DecodeVerbsInfo decodes a VerbsInfo body.
func DecodeVerbsInfo(body []byte) (*VerbsInfo, error) {
	d := &dec{b: body, what: "verbs info"}
	v := &VerbsInfo{}
	v.Version = d.u8("version")
	if d.err == nil && (v.Version < verbsInfoVersionMin || v.Version > VerbsInfoVersion) {
		d.fail("version %d, want %d to %d", v.Version, verbsInfoVersionMin, VerbsInfoVersion)
	}
	v.Device = d.str(64, "device")
	v.Port = d.u8("port")
	v.LinkLayer = d.u8("link layer")
	v.GIDIndex = d.u8("gid index")
	v.MTU = d.u16("mtu")
	v.LID = d.u16("lid")
	d.fixed(v.GID[:], "gid")
	n := int(d.u8("qp count"))
	if d.err == nil && n > MaxQPs {
		d.fail("%d queue pairs, limit %d", n, MaxQPs)
	}
	for i := 0; i < n && d.err == nil; i++ {
		v.QPNs = append(v.QPNs, d.u32("qpn"))
		v.PSNs = append(v.PSNs, d.u32("psn")&0xffffff)
	}
	v.RecvDepth = d.u32("recv depth")
	v.MaxInline = d.u32("max inline")
	v.CM = d.boolean("cm")
	d.fixed(v.IP[:], "ip")
	v.CMPort = d.u16("cm port")
	if d.err == nil && v.Version >= VerbsInfoVersionKeys {
		n := int(d.u16("key count"))
		if d.err == nil && n > MaxExports {
			d.fail("%d region keys, limit %d", n, MaxExports)
		}
		for i := 0; i < n && d.err == nil; i++ {
			k := RegionKey{ID: d.u32("region id"), Access: d.u8("access"), Base: d.u64("base"), Len: d.u64("len"),
				Key: d.u64("key"), RKey: d.u32("rkey")}
			switch {
			case d.err != nil:
			case k.Access == 0 || k.Access&^3 != 0:
				d.fail("region %d: access %#x is not read, write or read-write", k.ID, k.Access)
			case k.Base+k.Len < k.Base:
				d.fail("region %d: address range %#x+%d wraps", k.ID, k.Base, k.Len)
			default:
				v.Keys = append(v.Keys, k)
			}
		}
	}
	if d.err == nil && v.Version >= verbsInfoVersionRails {
		n := int(d.u8("rail count"))
		if d.err == nil && n > MaxRails-1 {
			d.fail("%d more rails, limit %d", n, MaxRails-1)
		}
		for i := 0; i < n && d.err == nil; i++ {
			var g [16]byte
			d.fixed(g[:], "rail gid")
			v.RailGIDs = append(v.RailGIDs, g)
		}
	}
	if d.err == nil {
		switch {
		case v.Port == 0:
			d.fail("port 0")
		case v.LinkLayer != LinkIB && v.LinkLayer != LinkEthernet:
			d.fail("link layer %d", v.LinkLayer)
		case v.MTU != 256 && v.MTU != 512 && v.MTU != 1024 && v.MTU != 2048 && v.MTU != 4096:
			d.fail("mtu %d is not 256, 512, 1024, 2048 or 4096", v.MTU)
		}
	}
	return v, d.done()
}

func (v *VerbsInfo) String() string {
	return fmt.Sprintf("device %s port %d gid index %d gid %s mtu %d lid %d", v.Device, v.Port, v.GIDIndex, net.IP(v.GID[:]), v.MTU, v.LID)
}

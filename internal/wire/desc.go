package wire

import "fmt"

// RegionDescLen is the encoded size of a RegionDesc.
const RegionDescLen = 48

const regionDescVersion = 1

// RegionDesc is the serialized description of a registered region: enough
// for a peer to address it.
type RegionDesc struct {
	Owner  [16]byte // engine ID of the region's owner
	ID     uint32
	Access uint8 // bit 0 read, bit 1 write
	Addr   uint64
	Len    uint64
	Key    uint64
	Kind   uint8 // the memory's kind: 0 host, 1 a GPU's (CUDA)
	Device uint8 // the GPU's ordinal, for Kind 1
}

// maxKind is the largest memory kind a RegionDesc carries.
const maxKind = 1

// AppendRegionDesc appends d's fixed-size encoding to b.
func AppendRegionDesc(b []byte, d *RegionDesc) []byte {
	e := &enc{b: b}
	e.u8(regionDescVersion)
	e.u8(d.Access)
	e.u8(d.Kind)
	e.u8(d.Device)
	e.u32(d.ID)
	e.raw(d.Owner[:])
	e.u64(d.Addr)
	e.u64(d.Len)
	e.u64(d.Key)
	return e.b
}

// DecodeRegionDesc decodes a RegionDesc of exactly RegionDescLen bytes.
func DecodeRegionDesc(b []byte) (RegionDesc, error) {
	d := &dec{b: b, what: "region descriptor"}
	var r RegionDesc
	if v := d.u8("version"); d.err == nil && v != regionDescVersion {
		d.fail("version %d, want %d", v, regionDescVersion)
	}
	r.Access = d.u8("access")
	if d.err == nil && (r.Access == 0 || r.Access&^3 != 0) {
		d.fail("access %#x is not read, write or read-write", r.Access)
	}
	r.Kind = d.u8("memory kind")
	r.Device = d.u8("device")
	if d.err == nil && (r.Kind > maxKind || r.Kind == 0 && r.Device != 0) {
		d.fail("memory kind %d device %d: want host (0, 0) or CUDA (1, N)", r.Kind, r.Device)
	}
	r.ID = d.u32("id")
	d.fixed(r.Owner[:], "owner")
	r.Addr = d.u64("addr")
	r.Len = d.u64("len")
	r.Key = d.u64("key")
	if d.err == nil && r.Addr+r.Len < r.Addr {
		d.fail("address range %#x+%d wraps", r.Addr, r.Len)
	}
	if err := d.done(); err != nil {
		return RegionDesc{}, err
	}
	return r, nil
}

func (d RegionDesc) String() string {
	return fmt.Sprintf("region %d [%#x, +%d)", d.ID, d.Addr, d.Len)
}

package xfer

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/xferio/xfer/internal/regions"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

// Access is the set of rights a region grants to remote peers.
type Access = transport.Access

// Rights.
const (
	AccessRead      = transport.AccessRead
	AccessWrite     = transport.AccessWrite
	AccessReadWrite = transport.AccessReadWrite
)

// RemoteAddr names bytes in a peer's region: region ID, absolute address,
// key. Build one with RegionDesc.At.
type RemoteAddr = transport.RemoteAddr

// ID identifies an engine.
type ID [16]byte

func (id ID) String() string { return fmt.Sprintf("%x", id[:8]) }

// RegionDesc describes a registered region to peers: the serializable remote
// descriptor. Whoever holds it may access the region with the rights it
// grants, so hand it only to peers that should.
type RegionDesc struct {
	Owner  ID // the engine that owns the region
	ID     uint32
	Addr   uint64 // address of the first byte, in the owner's address space
	Len    uint64
	Key    uint64
	Access Access
	// Memory is where the region lives in its owner: host memory, or a
	// GPU's (mem.CUDA(n)). Operations reach either kind the same way.
	Memory mem.Location
}

// At returns the remote address off bytes into the region.
func (d RegionDesc) At(off uint64) RemoteAddr {
	return RemoteAddr{Region: d.ID, Addr: d.Addr + off, Key: d.Key}
}

// Slice returns the descriptor of n bytes at off; it does not narrow the
// rights the key grants (the key covers the whole registered region):
// Region.Grant does.
func (d RegionDesc) Slice(off, n uint64) (RegionDesc, error) {
	if off > d.Len || n > d.Len-off {
		return RegionDesc{}, fmt.Errorf("slice [%d, +%d) of a %d-byte region: out of range", off, n, d.Len)
	}
	d.Addr += off
	d.Len = n
	return d, nil
}

// RegionDescLen is the size of a RegionDesc's binary form.
const RegionDescLen = wire.RegionDescLen

// MarshalBinary encodes d in its fixed 48-byte wire form.
func (d RegionDesc) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, RegionDescLen))
}

// AppendBinary appends d's binary form (MarshalBinary) to b.
func (d RegionDesc) AppendBinary(b []byte) ([]byte, error) {
	w := d.wire()
	return wire.AppendRegionDesc(b, &w), nil
}

// UnmarshalBinary decodes the wire form.
func (d *RegionDesc) UnmarshalBinary(b []byte) error {
	w, err := wire.DecodeRegionDesc(b)
	if err != nil {
		return err
	}
	*d = descFromWire(w)
	return nil
}

const descTextPrefix = "xfer1:"

// String is the text form: "xfer1:" and the base64url of the wire form.
func (d RegionDesc) String() string {
	b, _ := d.MarshalBinary()
	return descTextPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// MarshalText is String.
func (d RegionDesc) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses the text form.
func (d *RegionDesc) UnmarshalText(b []byte) error {
	v, err := ParseRegionDesc(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseRegionDesc parses the text form made by String.
func ParseRegionDesc(s string) (RegionDesc, error) {
	rest, ok := strings.CutPrefix(s, descTextPrefix)
	if !ok {
		return RegionDesc{}, fmt.Errorf("region descriptor %.20q: missing %q prefix", s, descTextPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return RegionDesc{}, fmt.Errorf("region descriptor: %w", err)
	}
	var d RegionDesc
	return d, d.UnmarshalBinary(b)
}

func (d RegionDesc) wire() wire.RegionDesc {
	return wire.RegionDesc{Owner: d.Owner, ID: d.ID, Access: uint8(d.Access), Addr: d.Addr, Len: d.Len, Key: d.Key,
		Kind: uint8(d.Memory.Kind), Device: uint8(d.Memory.Device)}
}

func descFromWire(w wire.RegionDesc) RegionDesc {
	return RegionDesc{Owner: w.Owner, ID: w.ID, Access: Access(w.Access), Addr: w.Addr, Len: w.Len, Key: w.Key,
		Memory: mem.Location{Kind: mem.Kind(w.Kind), Device: int(w.Device)}}
}

// Region is memory registered with an engine: peers may access it with the
// rights it grants, through its descriptor. Its memory comes from mmap.
type Region struct {
	e    *Engine
	mr   *mem.Region
	h    *mem.Handle // what transports see of it: id, key, rights, memory, pins
	once sync.Once

	// parent is the region a grant is part of (nil for a region); grants
	// are the open grants of a region, closed before it.
	parent *Region
	gmu    sync.Mutex
	grants map[*Region]struct{}
	closed bool // under gmu: no grant may be added
}

// ID is the region's number in its engine.
func (r *Region) ID() uint32 { return r.h.ID() }

// Bytes is the region's memory.
func (r *Region) Bytes() []byte { return r.mr.Bytes() }

// Access is what the region grants to peers.
func (r *Region) Access() Access { return r.h.Access() }

// Desc is the region's remote descriptor.
func (r *Region) Desc() RegionDesc {
	return RegionDesc{Owner: r.e.id, ID: r.h.ID(), Addr: r.h.Base(), Len: r.h.Len(), Key: r.h.Key(), Access: r.h.Access(), Memory: r.h.Location()}
}

// Grant registers n bytes at off of the region as a grant: a region of
// their own, with its own ID and key and rights access (no more than the
// region's), whose descriptor reaches those bytes only. The transports
// keep a peer to it below the engine where they can:
//   - rdma registers the grant's range alone, with its rights: the NIC
//     refuses an access outside it with the grant's rkey;
//   - tcp: the owner's engine checks every access, as for any region;
//   - shm never maps a grant into the peer (a mapping covers whole pages
//     of a memfd, from its start), so its accesses take the stream path,
//     where the owner checks each.
//
// Close the grant to revoke it: peers are told, and its registration (its
// rkey) is dropped once accesses in progress finish. Closing the region
// closes its grants first. A grant is never the region of a local buffer:
// local operations find the region itself. Grants of GPU memory are not
// supported.
func (r *Region) Grant(off, n uint64, access Access) (*Region, error) {
	if r.parent != nil {
		return nil, fmt.Errorf("grant [%d, +%d) of grant %d: grant from its region instead", off, n, r.h.ID())
	}
	if n == 0 || off > r.h.Len() || n > r.h.Len()-off {
		return nil, fmt.Errorf("grant [%d, +%d) of region %d (%d bytes): out of range", off, n, r.h.ID(), r.h.Len())
	}
	if access == 0 || access&^r.h.Access() != 0 {
		return nil, fmt.Errorf("grant of region %d: rights %s, but the region grants %s", r.h.ID(), access, r.h.Access())
	}
	if !r.h.Location().IsHost() {
		return nil, fmt.Errorf("grant of region %d: %w: grants of GPU memory", r.h.ID(), ErrNotSupported)
	}
	r.gmu.Lock()
	defer r.gmu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("grant of region %d: %w", r.h.ID(), ErrClosed)
	}
	mr, err := mem.WrapRegion(r.mr.Bytes()[off : off+n])
	if err != nil {
		return nil, fmt.Errorf("grant of region %d: %w", r.h.ID(), err)
	}
	g, err := r.e.addRegion(mr, access, r)
	if err != nil {
		return nil, err
	}
	if r.grants == nil {
		r.grants = make(map[*Region]struct{})
	}
	r.grants[g] = struct{}{}
	return g, nil
}

// Location is where the region's memory lives: host memory or a GPU's.
// The Bytes of a region on a GPU are device addresses, which the CPU must
// not touch.
func (r *Region) Location() mem.Location { return r.h.Location() }

// Close deregisters the region: peers can no longer reach it, peers that
// mapped it (shm) are told to drop it, remote accesses in progress finish
// first, transports that registered it with a device (rdma) release it,
// and memory the engine mapped is unmapped. Idempotent.
func (r *Region) Close() error {
	if r == nil {
		return nil
	}
	var err error
	r.once.Do(func() {
		r.gmu.Lock()
		r.closed = true
		grants := r.grants
		r.grants = nil
		r.gmu.Unlock()
		for g := range grants {
			err = errors.Join(err, g.Close())
		}
		if p := r.parent; p != nil {
			p.gmu.Lock()
			delete(p.grants, r)
			p.gmu.Unlock()
		}
		r.h.Retire()
		r.e.regions.Remove(r.h)
		r.e.revoke(r.h.ID())
		r.h.Drain()
		for _, t := range r.e.transports {
			if reg, ok := t.(transport.Registrar); ok {
				reg.RegionRemoved(r.h)
			}
		}
		err = errors.Join(err, r.mr.Close())
	})
	return err
}

// regionTable holds the registered regions (internal/regions).
type regionTable = regions.Table[*Region]

// addRegion registers mr with access: a region, or, with a parent, a grant
// of part of it, which is reached by ID only (local buffers find the
// parent).
func (e *Engine) addRegion(mr *mem.Region, access Access, parent *Region) (*Region, error) {
	r, h, err := e.regions.Add(mr, access, parent != nil, func(h *mem.Handle) *Region {
		return &Region{e: e, mr: mr, h: h, parent: parent}
	})
	if err != nil {
		return nil, err
	}
	// No peer can name the region before its descriptor (and key) leaves
	// this function.
	for _, tr := range e.transports {
		if reg, ok := tr.(transport.Registrar); ok {
			reg.RegionAdded(h)
		}
	}
	return r, nil
}

// pinLocal finds the registered region holding b and pins it, so that it
// stays mapped until Unpin: a transport may still be copying from or into
// it (shm copies are plain memory accesses).
func (e *Engine) pinLocal(b []byte) (*mem.Handle, error) {
	_, h, ok := e.regions.Find(b)
	if !ok {
		return nil, fmt.Errorf("local buffer %#x+%d: %w", uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b), ErrNotRegistered)
	}
	if !h.Pin() {
		return nil, fmt.Errorf("local buffer: region %d is deregistered: %w", h.ID(), ErrClosed)
	}
	return h, nil
}

// closeRegions deregisters every region.
func (e *Engine) closeRegions() error {
	var errs []error
	for _, r := range e.regions.All() {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// Buffer is a block of the engine's pool: a zero-copy view into registered
// memory. Fill Bytes in place and Write or Send it without a copy.
type Buffer struct {
	mem.Buffer
	r *Region
}

// Region is the registered region holding the buffer.
func (b Buffer) Region() *Region { return b.r }

// Remote is the address peers use to reach the first byte of the buffer.
func (b Buffer) Remote() RemoteAddr {
	return RemoteAddr{Region: b.r.h.ID(), Addr: b.r.h.Base() + uint64(b.Offset()), Key: b.r.h.Key()}
}

// Desc is a descriptor covering exactly the buffer, to hand to a peer. The
// key is the region's: it does not confine the peer to the buffer (Grant
// does).
func (b Buffer) Desc() RegionDesc {
	d := b.r.Desc()
	d.Addr += uint64(b.Offset())
	d.Len = uint64(b.Len())
	return d
}

// Grant registers the buffer as a grant of its region (Region.Grant) with
// rights access: the grant's descriptor confines a peer to the buffer's
// bytes, below the engine where the transport can. Close the grant before
// the buffer is freed, to revoke it.
func (b Buffer) Grant(access Access) (*Region, error) {
	return b.r.Grant(uint64(b.Offset()), uint64(b.Len()), access)
}

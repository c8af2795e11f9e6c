package xfer

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
}

// At returns the remote address off bytes into the region.
func (d RegionDesc) At(off uint64) RemoteAddr {
	return RemoteAddr{Region: d.ID, Addr: d.Addr + off, Key: d.Key}
}

// Slice returns the descriptor of n bytes at off; it does not narrow the
// rights the key grants (the key covers the whole registered region).
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
	return wire.RegionDesc{Owner: d.Owner, ID: d.ID, Access: uint8(d.Access), Addr: d.Addr, Len: d.Len, Key: d.Key}
}

func descFromWire(w wire.RegionDesc) RegionDesc {
	return RegionDesc{Owner: w.Owner, ID: w.ID, Access: Access(w.Access), Addr: w.Addr, Len: w.Len, Key: w.Key}
}

// Region is memory registered with an engine: peers may access it with the
// rights it grants, through its descriptor. Its memory comes from mmap.
type Region struct {
	e      *Engine
	id     uint32
	key    uint64
	access Access
	mr     *mem.Region
	base   uint64
	n      uint64

	refs    atomic.Int64 // remote accesses in progress
	closing atomic.Bool
	once    sync.Once
}

// ID is the region's number in its engine.
func (r *Region) ID() uint32 { return r.id }

// Bytes is the region's memory.
func (r *Region) Bytes() []byte { return r.mr.Bytes() }

// Access is what the region grants to peers.
func (r *Region) Access() Access { return r.access }

// Desc is the region's remote descriptor.
func (r *Region) Desc() RegionDesc {
	return RegionDesc{Owner: r.e.id, ID: r.id, Addr: r.base, Len: r.n, Key: r.key, Access: r.access}
}

// Unpin ends one remote access (transport.Pin).
func (r *Region) Unpin() { r.refs.Add(-1) }

// Close deregisters the region: peers can no longer reach it, peers that
// mapped it (shm) are told to drop it, remote accesses in progress finish
// first, and memory the engine mapped is unmapped. Idempotent.
func (r *Region) Close() error {
	if r == nil {
		return nil
	}
	var err error
	r.once.Do(func() {
		r.closing.Store(true)
		r.e.regions.remove(r)
		r.e.revoke(r.id)
		for r.refs.Load() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
		for _, t := range r.e.transports {
			if f, ok := t.(forgetter); ok {
				f.Forget(r.mr.Bytes())
			}
		}
		err = r.mr.Close()
	})
	return err
}

// forgetter is a transport that registers memory with a device: it must
// deregister a region before the region is unmapped.
type forgetter interface{ Forget(region []byte) }

// regionTable holds the registered regions. Readers (every remote access,
// every local operation) load an immutable snapshot without locking.
type regionTable struct {
	mu   sync.Mutex
	snap atomic.Pointer[regionSnap]
	next uint32
}

type regionSnap struct {
	byID   map[uint32]*Region
	byAddr []*Region // sorted by base address
}

func (t *regionTable) load() *regionSnap {
	if s := t.snap.Load(); s != nil {
		return s
	}
	return &regionSnap{}
}

func (t *regionTable) add(e *Engine, mr *mem.Region, access Access) (*Region, error) {
	if access == 0 || access&^AccessReadWrite != 0 {
		return nil, fmt.Errorf("register: access %d must be read, write or read-write", access)
	}
	var k [8]byte
	if _, err := rand.Read(k[:]); err != nil {
		return nil, err
	}
	b := mr.Bytes()
	r := &Region{e: e, key: binary.LittleEndian.Uint64(k[:]), access: access, mr: mr,
		base: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), n: uint64(len(b))}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	for _, o := range old.byAddr {
		if r.base < o.base+o.n && o.base < r.base+r.n {
			return nil, fmt.Errorf("register [%#x, +%d): overlaps registered region %d", r.base, r.n, o.id)
		}
	}
	t.next++
	r.id = t.next
	s := &regionSnap{byID: make(map[uint32]*Region, len(old.byID)+1), byAddr: append(append([]*Region(nil), old.byAddr...), r)}
	for id, o := range old.byID {
		s.byID[id] = o
	}
	s.byID[r.id] = r
	sort.Slice(s.byAddr, func(i, j int) bool { return s.byAddr[i].base < s.byAddr[j].base })
	t.snap.Store(s)
	return r, nil
}

func (t *regionTable) remove(r *Region) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.load()
	s := &regionSnap{byID: make(map[uint32]*Region, len(old.byID))}
	for id, o := range old.byID {
		if o != r {
			s.byID[id] = o
		}
	}
	for _, o := range old.byAddr {
		if o != r {
			s.byAddr = append(s.byAddr, o)
		}
	}
	t.snap.Store(s)
}

// pinLocal finds the registered region holding b and pins it, so that it
// stays mapped until Unpin: a transport may still be copying from or into
// it (shm copies are plain memory accesses).
func (t *regionTable) pinLocal(b []byte) (*Region, error) {
	r, err := t.local(b)
	if err != nil {
		return nil, err
	}
	r.refs.Add(1)
	if r.closing.Load() {
		r.refs.Add(-1)
		return nil, fmt.Errorf("local buffer: region %d is deregistered: %w", r.id, ErrClosed)
	}
	return r, nil
}

// local finds the registered region holding b.
func (t *regionTable) local(b []byte) (*Region, error) {
	s := t.load()
	p := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	n := uint64(len(b))
	i := sort.Search(len(s.byAddr), func(i int) bool { return s.byAddr[i].base > p }) - 1
	if i >= 0 {
		r := s.byAddr[i]
		if p-r.base <= r.n && n <= r.n-(p-r.base) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("local buffer %#x+%d: %w", p, n, ErrNotRegistered)
}

// resolve implements transport.Host.Resolve for the engine.
func (t *regionTable) resolve(id uint32, key, addr, n uint64, want Access) (transport.Resolved, error) {
	r := t.load().byID[id]
	if r == nil {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.UnknownRegion, Want: want, Region: id, Addr: addr, Len: n}
	}
	if r.key^key != 0 {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.WrongKey, Want: want, Region: id, Addr: addr, Len: n}
	}
	if r.access&want != want {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.NoAccess, Want: want, Region: id, Addr: addr, Len: n}
	}
	if addr < r.base || addr-r.base > r.n || n > r.n-(addr-r.base) {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.OutOfRange, Want: want, Region: id, Addr: addr, Len: n}
	}
	r.refs.Add(1)
	if r.closing.Load() {
		r.refs.Add(-1)
		return transport.Resolved{}, &transport.AccessError{Kind: transport.UnknownRegion, Want: want, Region: id, Addr: addr, Len: n}
	}
	off := addr - r.base
	return transport.NewResolved(r.mr.Bytes()[off:off+n:off+n], r.mr.FD(), r.base, r.n, r), nil
}

func (t *regionTable) lookup(id uint32, key uint64, want Access) (transport.Resolved, error) {
	r := t.load().byID[id]
	if r == nil {
		return transport.Resolved{}, &transport.AccessError{Kind: transport.UnknownRegion, Want: want, Region: id}
	}
	return t.resolve(id, key, r.base, r.n, want)
}

// closeAll deregisters every region.
func (t *regionTable) closeAll() error {
	var errs []error
	for _, r := range t.load().byAddr {
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
	return RemoteAddr{Region: b.r.id, Addr: b.r.base + uint64(b.Offset()), Key: b.r.key}
}

// Desc is a descriptor covering exactly the buffer, to hand to a peer. The
// key is the region's: it does not confine the peer to the buffer.
func (b Buffer) Desc() RegionDesc {
	d := b.r.Desc()
	d.Addr += uint64(b.Offset())
	d.Len = uint64(b.Len())
	return d
}

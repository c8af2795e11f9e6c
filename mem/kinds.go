package mem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// The table of memory kinds
//
// Each memory kind is one row of kinds: its name, the other names
// ParseLocation takes for it, and, for memory on a device, its Driver
// (driver.go): the one way the engine, its staging and Engine.Copy reach
// that kind's devices. Nothing above mem calls a device's API. Adding a
// kind (ROCm, a file for an offload tier) is its binding's own package (as
// internal/cuda is CUDA's, loaded at run time with a no-cgo twin), a file
// here that implements Driver over it (cuda.go), and its row below.

// KindInfo is one memory kind's row in the table.
type KindInfo struct {
	Kind Kind
	// Name is the kind's name: Kind.String, the prefix of a Location
	// ("cuda:0"), a member of a Kinds list.
	Name string
	// Aliases are other names ParseLocation takes for it ("gpu", "cpu").
	Aliases []string
	// Driver reaches the kind's devices; nil for host memory, which the
	// CPU reaches itself.
	Driver Driver
}

// kinds is the table, indexed by Kind.
var kinds = [...]KindInfo{
	KindHost: {Kind: KindHost, Name: "host", Aliases: []string{"cpu"}},
	KindCUDA: {Kind: KindCUDA, Name: "cuda", Aliases: []string{"gpu"}, Driver: cudaDriver{}},
}

// KindTable returns the table of memory kinds, in the order of their Kind
// values.
func KindTable() []KindInfo { return slices.Clone(kinds[:]) }

// Info returns k's row, and false for a kind not in the table.
func (k Kind) Info() (KindInfo, bool) {
	if int(k) >= len(kinds) {
		return KindInfo{}, false
	}
	return kinds[k], true
}

// The text forms of kinds and locations are the table's names.

// String is the kind's name in the table: "host" or "cuda".
func (k Kind) String() string {
	if info, ok := k.Info(); ok {
		return info.Name
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// String lists the kinds, comma-separated: "host,cuda".
func (s Kinds) String() string {
	var names []string
	for k := Kind(0); k < 8; k++ {
		if s.Has(k) {
			names = append(names, k.String())
		}
	}
	return strings.Join(names, ",")
}

// MarshalText implements encoding.TextMarshaler (String), for status
// documents.
func (s Kinds) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: a comma-separated
// list of kinds as String writes it ("" is the empty set).
func (s *Kinds) UnmarshalText(text []byte) error {
	var set Kinds
	if len(text) > 0 {
	names:
		for _, name := range strings.Split(string(text), ",") {
			for _, info := range kinds {
				if strings.TrimSpace(name) == info.Name {
					set |= KindSet(info.Kind)
					continue names
				}
			}
			var want []string
			for _, info := range kinds {
				want = append(want, info.Name)
			}
			return fmt.Errorf("memory kind %q: want %s", name, strings.Join(want, " or "))
		}
	}
	*s = set
	return nil
}

// String is "host" or "cuda:N".
func (l Location) String() string {
	if l.Kind == KindHost {
		return "host"
	}
	return l.Kind.String() + ":" + strconv.Itoa(l.Device)
}

// ParseLocation parses "host" (or "cpu", or empty) and "cuda:N" (or
// "cuda", device 0; "gpu:N" is taken for "cuda:N"): a kind's name or
// alias in the table, and a device's ordinal for a device kind.
func ParseLocation(s string) (Location, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return Host, nil
	}
	var want []string
	for _, info := range kinds {
		for _, name := range append([]string{info.Name}, info.Aliases...) {
			if v == name {
				return Location{Kind: info.Kind}, nil
			}
			if info.Driver == nil {
				want = append(want, name)
				continue
			}
			rest, ok := strings.CutPrefix(v, name+":")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || n > maxDevice {
				return Location{}, fmt.Errorf("memory device %q: the device must be a GPU index from 0 to %d", s, maxDevice)
			}
			return Location{Kind: info.Kind, Device: n}, nil
		}
		if info.Driver != nil {
			want = append(want, info.Name, info.Name+":N")
		}
	}
	last := len(want) - 1
	return Location{}, fmt.Errorf("memory device %q: must be %s or %s", s, strings.Join(want[:last], ", "), want[last])
}

// MarshalText implements encoding.TextMarshaler.
func (l Location) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseLocation.
func (l *Location) UnmarshalText(b []byte) error {
	v, err := ParseLocation(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// DeviceSet is one user's devices of every kind in the table, each opened
// on first use: what an engine keeps. The zero value is ready; it is safe
// for concurrent use.
type DeviceSet struct {
	mu   sync.Mutex
	sets [len(kinds)]Devices
}

// devices returns the set of kind k, made on first use.
func (s *DeviceSet) devices(k Kind) (Devices, error) {
	info, ok := k.Info()
	if !ok || info.Driver == nil {
		return nil, fmt.Errorf("%s memory has no device", k)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sets[k] == nil {
		s.sets[k] = info.Driver.Open()
	}
	return s.sets[k], nil
}

// Get returns the device of l, opening it on first use. Host memory has
// none.
func (s *DeviceSet) Get(l Location) (Device, error) {
	d, err := s.devices(l.Kind)
	if err != nil {
		return nil, err
	}
	return d.Get(l.Device)
}

// Opened lists the devices opened so far, by kind and then ordinal.
func (s *DeviceSet) Opened() []Location {
	s.mu.Lock()
	sets := s.sets
	s.mu.Unlock()
	var out []Location
	for k, d := range sets {
		if d == nil {
			continue
		}
		for _, n := range d.Opened() {
			out = append(out, Location{Kind: Kind(k), Device: n})
		}
	}
	return out
}

// Close closes every device; the set is usable again afterwards. Close
// the Regions of its devices first.
func (s *DeviceSet) Close() error {
	s.mu.Lock()
	sets := s.sets
	s.mu.Unlock()
	var errs []error
	for _, d := range sets {
		if d != nil {
			errs = append(errs, d.Close())
		}
	}
	return errors.Join(errs...)
}

// Copy copies src to dst, of one length, either of which may be device
// memory and the other any host memory; locate says where each lives (the
// caller knows its regions' kinds; LocateBytes asks the drivers). Host to
// host it is copy; else the device's driver copies.
func (s *DeviceSet) Copy(dst, src []byte, locate func([]byte) Location) error {
	if len(dst) != len(src) {
		return fmt.Errorf("copy: %d bytes into %d", len(src), len(dst))
	}
	dl, sl := locate(dst), locate(src)
	if dl.IsHost() && sl.IsHost() {
		copy(dst, src)
		return nil
	}
	if len(src) == 0 {
		return nil
	}
	dev := dl
	if dl.IsHost() {
		dev = sl
	}
	c, err := s.Get(dev)
	if err != nil {
		return fmt.Errorf("copy %d bytes from %s to %s memory: %w", len(src), sl, dl, err)
	}
	if err := c.Copy(addrOf(dst), addrOf(src), len(src)); err != nil {
		return fmt.Errorf("copy %d bytes from %s to %s memory: %w", len(src), sl, dl, err)
	}
	return nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// LocateBytes is Locate for the memory of b; empty, it is host memory.
func LocateBytes(b []byte) Location {
	if len(b) == 0 {
		return Host
	}
	return Locate(addrOf(b))
}

// Locate says where memory at p lives as the device drivers see it: on a
// device of a kind in the table, else in host memory.
func Locate(p uintptr) Location {
	for _, info := range kinds {
		if info.Driver == nil {
			continue
		}
		if n, ok := info.Driver.Locate(p); ok {
			return Location{Kind: info.Kind, Device: n}
		}
	}
	return Host
}

// WrapDeviceRegion makes a Region of device memory that someone else
// allocated (a framework's tensor): size bytes at device address p. The
// driver of a kind in the table must know p as its memory; the Region
// takes its kind and device from the driver. The caller keeps ownership:
// Close frees nothing, and the memory must stay allocated until the Region
// is closed and no Buffer of it is in use.
func WrapDeviceRegion(p uintptr, size int) (*Region, error) {
	if p == 0 || size <= 0 {
		return nil, fmt.Errorf("wrap device memory %#x+%d: empty memory", p, size)
	}
	// The first error that is not ErrNotDevice says more (no driver)
	// than the kinds that do not know p.
	var first, notDevice error
	for _, info := range kinds {
		if info.Driver == nil {
			continue
		}
		r, err := info.Driver.Wrap(p, size)
		switch {
		case err == nil:
			return r, nil
		case !errors.Is(err, ErrNotDevice):
			first = cmp.Or(first, err)
		default:
			notDevice = err
		}
	}
	return nil, cmp.Or(first, notDevice, fmt.Errorf("wrap device memory %#x+%d: %w", p, size, ErrNotDevice))
}

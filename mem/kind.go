package mem

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the kind of memory a Region holds.
type Kind uint8

const (
	// KindHost is host memory, mapped in this process: the CPU, a NIC and
	// a peer on the same host can touch it.
	KindHost Kind = iota
	// KindCUDA is memory of an NVIDIA GPU (cuMemAlloc). The CPU must never
	// touch it: its bytes are moved by the GPU's copy engines, by a NIC
	// that can reach GPU memory (DMA-BUF, nvidia-peermem), or through
	// host staging buffers.
	KindCUDA
)

// String is the kind's name in the table: "host" or "cuda".
func (k Kind) String() string {
	if info, ok := k.Info(); ok {
		return info.Name
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Kinds is a set of memory kinds: those a transport moves itself, say.
type Kinds uint8

// KindSet returns the set of the kinds given.
func KindSet(kinds ...Kind) Kinds {
	var s Kinds
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in s.
func (s Kinds) Has(k Kind) bool { return k < 8 && s&(1<<k) != 0 }

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

// Location says where memory lives: its kind and, for GPU memory, the
// device's ordinal. The zero Location is host memory.
type Location struct {
	Kind   Kind
	Device int // the GPU's ordinal for KindCUDA; 0 for host memory
}

// Host is the Location of host memory.
var Host = Location{}

// CUDA is the Location of GPU n's memory.
func CUDA(n int) Location { return Location{Kind: KindCUDA, Device: n} }

// IsHost reports whether l is host memory.
func (l Location) IsHost() bool { return l.Kind == KindHost }

// String is "host" or "cuda:N".
func (l Location) String() string {
	if l.Kind == KindHost {
		return "host"
	}
	return l.Kind.String() + ":" + strconv.Itoa(l.Device)
}

// maxDevice bounds a device ordinal: descriptors carry it in one byte.
const maxDevice = 255

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

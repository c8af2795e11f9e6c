package mem

// Kind is the kind of memory a Region holds. Its name, and the text forms
// of Kinds and Location, come from the table of kinds (kinds.go).
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

// maxDevice bounds a device ordinal: descriptors carry it in one byte.
const maxDevice = 255

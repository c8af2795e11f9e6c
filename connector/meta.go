package connector

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says what a Put stored, so that a Get can give it back as it was.
type Kind uint8

// The kinds of value.
const (
	KindBytes  Kind = iota + 1 // a []byte
	KindTensor                 // a Tensor: Meta.DType and Meta.Shape describe it
	KindObject                 // a Go value, as CBOR (EncodeObject)
)

func (k Kind) String() string {
	switch k {
	case KindBytes:
		return "bytes"
	case KindTensor:
		return "tensor"
	case KindObject:
		return "object"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Meta is what a Put returns and a Get may be handed: where the value is
// (the producer's address) and what it is (key, size, kind, and a tensor's
// dtype and shape). It is small and serializable (MarshalBinary, and JSON
// through its field tags), so an orchestrator can pass it from the producer
// to the consumer. A Get may be given it whole, with only Producer set, or
// not at all.
type Meta struct {
	Producer string  `json:"producer"`
	Key      string  `json:"key"`
	Size     int64   `json:"size"`
	Kind     Kind    `json:"kind"`
	DType    DType   `json:"dtype,omitempty"`
	Shape    []int64 `json:"shape,omitempty"`
}

// Limits of an encoded Meta.
const (
	MaxKeyLen      = 4096
	MaxProducerLen = 1024
)

// ErrMeta matches errors decoding a Meta.
var ErrMeta = errors.New("malformed metadata")

// metaVersion is the first byte of an encoded Meta.
const metaVersion = 1

// Check reports whether m is consistent: a known kind, a key and size in
// range, and for a tensor a dtype and shape whose byte size is Size.
func (m Meta) Check() error {
	switch {
	case m.Kind < KindBytes || m.Kind > KindObject:
		return fmt.Errorf("connector: metadata: kind %d: %w", m.Kind, ErrMeta)
	case len(m.Key) == 0 || len(m.Key) > MaxKeyLen:
		return fmt.Errorf("connector: metadata: key of %d bytes: want 1 to %d: %w", len(m.Key), MaxKeyLen, ErrMeta)
	case len(m.Producer) > MaxProducerLen:
		return fmt.Errorf("connector: metadata: producer address of %d bytes: at most %d: %w", len(m.Producer), MaxProducerLen, ErrMeta)
	case m.Size < 0:
		return fmt.Errorf("connector: metadata: size %d: %w", m.Size, ErrMeta)
	}
	if m.Kind == KindTensor {
		n, err := ByteSize(m.DType, m.Shape)
		if err != nil {
			return fmt.Errorf("connector: metadata: %w: %w", err, ErrMeta)
		}
		if n != m.Size {
			return fmt.Errorf("connector: metadata: a %v tensor of shape %v is %d bytes, not %d: %w", m.DType, m.Shape, n, m.Size, ErrMeta)
		}
	} else if m.DType != 0 || len(m.Shape) != 0 {
		return fmt.Errorf("connector: metadata: a dtype or shape on a %v value: %w", m.Kind, ErrMeta)
	}
	return nil
}

// AppendBinary appends m's encoding: a version byte, the kind, the dtype,
// the size, the number of dimensions and each dimension (varints), then
// the producer and the key, each with its length.
func (m Meta) AppendBinary(b []byte) ([]byte, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	b = append(b, metaVersion, byte(m.Kind), byte(m.DType))
	b = binary.AppendUvarint(b, uint64(m.Size))
	b = binary.AppendUvarint(b, uint64(len(m.Shape)))
	for _, d := range m.Shape {
		b = binary.AppendUvarint(b, uint64(d))
	}
	b = binary.AppendUvarint(b, uint64(len(m.Producer)))
	b = append(b, m.Producer...)
	b = binary.AppendUvarint(b, uint64(len(m.Key)))
	return append(b, m.Key...), nil
}

// binaryLen is the length of m's encoding (AppendBinary), m being valid.
func (m *Meta) binaryLen() int {
	n := 3 + uvarintLen(uint64(m.Size)) + uvarintLen(uint64(len(m.Shape)))
	for _, d := range m.Shape {
		n += uvarintLen(uint64(d))
	}
	return n + uvarintLen(uint64(len(m.Producer))) + len(m.Producer) + uvarintLen(uint64(len(m.Key))) + len(m.Key)
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// MarshalBinary encodes m (AppendBinary).
func (m Meta) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

// joinWhat names a field in a decoding error: what, then suffix if any.
func joinWhat(what, suffix string) string {
	if suffix == "" {
		return what
	}
	return what + " " + suffix
}

// UnmarshalBinary decodes what AppendBinary wrote. Anything else, including
// trailing bytes and varints longer than they need be, is an error matching
// ErrMeta, and nothing is allocated beyond the sizes the limits allow.
func (m *Meta) UnmarshalBinary(b []byte) error {
	bad := func(what string) error { return fmt.Errorf("connector: metadata: %s: %w", what, ErrMeta) }
	if len(b) < 3 {
		return bad("too short")
	}
	if b[0] != metaVersion {
		return bad(fmt.Sprintf("version %d, want %d", b[0], metaVersion))
	}
	out := Meta{Kind: Kind(b[1]), DType: DType(b[2])}
	b = b[3:]
	// next reads a varint of at most max; what (and suffix, if not "")
	// name it in an error, and are joined only then.
	next := func(max uint64, what, suffix string) (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, bad(joinWhat(what, suffix) + ": truncated")
		}
		var short [binary.MaxVarintLen64]byte
		if n != binary.PutUvarint(short[:], v) {
			return 0, bad(joinWhat(what, suffix) + ": not in its shortest form") // one encoding per value
		}
		if v > max {
			return 0, bad(fmt.Sprintf("%s %d: at most %d", joinWhat(what, suffix), v, max))
		}
		b = b[n:]
		return v, nil
	}
	size, err := next(1<<63-1, "size", "")
	if err != nil {
		return err
	}
	out.Size = int64(size)
	dims, err := next(MaxDims, "dimensions", "")
	if err != nil {
		return err
	}
	if dims > 0 {
		out.Shape = make([]int64, dims)
		for i := range out.Shape {
			d, err := next(1<<63-1, "dimension", "")
			if err != nil {
				return err
			}
			out.Shape[i] = int64(d)
		}
	}
	str := func(max uint64, what string) (string, error) {
		n, err := next(max, what, "length")
		if err != nil {
			return "", err
		}
		if uint64(len(b)) < n {
			return "", bad(what + ": truncated")
		}
		s := string(b[:n])
		b = b[n:]
		return s, nil
	}
	if out.Producer, err = str(MaxProducerLen, "producer"); err != nil {
		return err
	}
	if out.Key, err = str(MaxKeyLen, "key"); err != nil {
		return err
	}
	if len(b) != 0 {
		return bad(fmt.Sprintf("%d bytes after the key", len(b)))
	}
	if err := out.Check(); err != nil {
		return err
	}
	*m = out
	return nil
}

package connector

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// DType is the element type of a Tensor. Its names are safetensors' ("F32",
// "BF16", "BOOL", ...), so that what xfer writes a Python program reads.
type DType uint8

// The element types.
const (
	F16 DType = iota + 1
	BF16
	F32
	F64
	I8
	I16
	I32
	I64
	U8
	U16
	U32
	U64
	Bool
)

var dtypes = [...]struct {
	name string
	size int
}{
	F16: {"F16", 2}, BF16: {"BF16", 2}, F32: {"F32", 4}, F64: {"F64", 8},
	I8: {"I8", 1}, I16: {"I16", 2}, I32: {"I32", 4}, I64: {"I64", 8},
	U8: {"U8", 1}, U16: {"U16", 2}, U32: {"U32", 4}, U64: {"U64", 8},
	Bool: {"BOOL", 1},
}

// Size is the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	if d == 0 || int(d) >= len(dtypes) {
		return 0
	}
	return dtypes[d].size
}

// String is the safetensors name, e.g. "F32".
func (d DType) String() string {
	if d.Size() == 0 {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypes[d].name
}

// MarshalText encodes the safetensors name.
func (d DType) MarshalText() ([]byte, error) {
	if d.Size() == 0 {
		return nil, fmt.Errorf("connector: invalid dtype %d", uint8(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText accepts what ParseDType does.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// ParseDType parses a safetensors name ("F32", "BOOL") or the usual
// lower-case spellings of NumPy and PyTorch ("float32", "bfloat16", "int8",
// "uint64", "bool", "f32", "half").
func ParseDType(s string) (DType, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for d := F16; d <= Bool; d++ {
		if dtypes[d].name == u {
			return d, nil
		}
	}
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "float16", "half":
		return F16, nil
	case "bfloat16":
		return BF16, nil
	case "float32", "float":
		return F32, nil
	case "float64", "double":
		return F64, nil
	case "int8":
		return I8, nil
	case "int16", "short":
		return I16, nil
	case "int32", "int":
		return I32, nil
	case "int64", "long":
		return I64, nil
	case "uint8":
		return U8, nil
	case "uint16":
		return U16, nil
	case "uint32":
		return U32, nil
	case "uint64":
		return U64, nil
	}
	return 0, fmt.Errorf("connector: dtype %q: want one of F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL", s)
}

// MaxDims is the largest number of dimensions a Tensor may have.
const MaxDims = 32

// Tensor is a row-major, contiguous array of DType elements of the given
// Shape, stored in Data. A 0-dimensional tensor (Shape empty) holds one
// element; a shape with a 0 dimension holds none.
type Tensor struct {
	DType DType
	Shape []int64
	Data  []byte
}

// ErrShape matches errors about a tensor's shape, dtype or size.
var ErrShape = errors.New("invalid tensor")

// Elements returns the number of elements a Shape holds. It fails on a
// negative dimension, more than MaxDims dimensions, or a product that
// overflows.
func Elements(shape []int64) (int64, error) {
	if len(shape) > MaxDims {
		return 0, fmt.Errorf("connector: shape of %d dimensions: at most %d: %w", len(shape), MaxDims, ErrShape)
	}
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("connector: shape %v: dimension %d is negative: %w", shape, i, ErrShape)
		}
		if d != 0 && n > math.MaxInt64/d {
			return 0, fmt.Errorf("connector: shape %v: too many elements: %w", shape, ErrShape)
		}
		n *= d
	}
	return n, nil
}

// ByteSize returns the size in bytes of a tensor of dtype d and the given
// shape, or an error matching ErrShape.
func ByteSize(d DType, shape []int64) (int64, error) {
	if d.Size() == 0 {
		return 0, fmt.Errorf("connector: dtype %v: %w", d, ErrShape)
	}
	n, err := Elements(shape)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/int64(d.Size()) {
		return 0, fmt.Errorf("connector: shape %v of %v: too many bytes: %w", shape, d, ErrShape)
	}
	return n * int64(d.Size()), nil
}

// Check reports whether t is consistent: a valid dtype and shape, and Data
// exactly as long as they say.
func (t Tensor) Check() error {
	n, err := ByteSize(t.DType, t.Shape)
	if err != nil {
		return err
	}
	if int64(len(t.Data)) != n {
		return fmt.Errorf("connector: %v tensor of shape %v needs %d bytes, has %d: %w", t.DType, t.Shape, n, len(t.Data), ErrShape)
	}
	return nil
}

// Element is a Go type that a tensor's data can be viewed as.
type Element interface {
	float32 | float64 | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | bool
}

// View returns t's data as a []E without copying. E must match the dtype:
// float32 for F32, float64 for F64, intN and uintN for IN and UN, bool for
// BOOL, and uint16 for F16 and BF16 (their raw bits). The data must be
// aligned for E; a BOOL tensor's bytes must each be 0 or 1 (what Go's bool
// may hold). The slice aliases t.Data.
func View[E Element](t Tensor) ([]E, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	var zero E
	if !viewable(t.DType, any(zero)) {
		return nil, fmt.Errorf("connector: a %v tensor cannot be viewed as %T: %w", t.DType, zero, ErrShape)
	}
	size := int(unsafe.Sizeof(zero))
	if len(t.Data) == 0 {
		return []E{}, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(t.Data))
	if uintptr(p)%uintptr(unsafe.Alignof(zero)) != 0 {
		return nil, fmt.Errorf("connector: %v data at %p is not aligned for %T (%d bytes): %w", t.DType, p, zero, unsafe.Alignof(zero), ErrShape)
	}
	if t.DType == Bool {
		for i, b := range t.Data {
			if b > 1 {
				return nil, fmt.Errorf("connector: BOOL tensor: byte %d is %d, not 0 or 1: %w", i, b, ErrShape)
			}
		}
	}
	return unsafe.Slice((*E)(p), len(t.Data)/size), nil
}

// viewable reports whether a value of v's type may view dtype d.
func viewable(d DType, v any) bool {
	switch v.(type) {
	case float32:
		return d == F32
	case float64:
		return d == F64
	case int8:
		return d == I8
	case int16:
		return d == I16
	case int32:
		return d == I32
	case int64:
		return d == I64
	case uint8:
		return d == U8
	case uint16:
		return d == U16 || d == F16 || d == BF16
	case uint32:
		return d == U32
	case uint64:
		return d == U64
	case bool:
		return d == Bool
	}
	return false
}

package connector

import (
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Objects (any Go value a Put is given that is neither bytes nor a Tensor)
// travel as CBOR (RFC 8949) through fxamacker/cbor, a codec built for
// untrusted input: the decoder checks that the data is well formed before
// it allocates, and bounds nesting, array and map sizes. encoding/gob is
// not safe on untrusted input and is not used.

// Decoding limits for objects.
const (
	MaxObjectNesting  = 64
	MaxObjectElements = 1 << 20 // items of one array, pairs of one map
)

// ErrObject matches errors decoding an object.
var ErrObject = errors.New("malformed object")

var (
	objEnc cbor.EncMode
	objDec cbor.DecMode
)

func init() {
	var err error
	if objEnc, err = (cbor.EncOptions{Sort: cbor.SortCoreDeterministic}).EncMode(); err != nil {
		panic(err)
	}
	objDec, err = cbor.DecOptions{
		MaxNestedLevels:  MaxObjectNesting,
		MaxArrayElements: MaxObjectElements,
		MaxMapPairs:      MaxObjectElements,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// EncodeObject encodes v as deterministic CBOR.
func EncodeObject(v any) ([]byte, error) {
	b, err := objEnc.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("connector: encode %T: %w", v, err)
	}
	return b, nil
}

// DecodeObject decodes b into the value v points to. Malformed or
// oversized input, trailing bytes, duplicate map keys and indefinite
// lengths are errors matching ErrObject; it never panics.
func DecodeObject(b []byte, v any) error {
	if err := objDec.Unmarshal(b, v); err != nil {
		return fmt.Errorf("connector: decode object into %T: %w: %w", v, err, ErrObject)
	}
	return nil
}

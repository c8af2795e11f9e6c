package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/fxamacker/cbor/v2"

	"github.com/xferio/xfer/connector"
)

// Objects cross the ABI as JSON and travel as the connector's CBOR
// (connector.EncodeObject), so that a Python program and a Go program
// exchange plain data (maps with string keys, arrays, strings, integers,
// floats, booleans and null) through a codec that is safe on untrusted
// input on both sides: Go's encoding/json and the connector's bounded CBOR
// decoder. Nothing here runs code the data names.
//
// A pickled Python object, which only a caller that trusts its peers may
// send or accept, travels as a CBOR byte string under pickleTag: a Go
// consumer sees a tagged byte string and never unpickles anything; the
// Python binding refuses it unless its owner opted in.

// pickleTag is the CBOR tag of a pickled Python object ("xfpy"), from the
// first-come-first-served range of RFC 8949.
const pickleTag = 0x78667079

// errObject marks an object that is not plain data, or malformed JSON.
var errObject = errors.New("not plain data")

// maxObjectJSON bounds the JSON of one object: what the pool could hold
// anyway is bounded by its size; this bounds the work before that.
const maxObjectJSON = 1 << 30

// objectFromJSON encodes the JSON value in b as the connector's CBOR.
func objectFromJSON(b []byte) ([]byte, error) {
	bad := func(format string, a ...any) ([]byte, error) {
		return nil, fmt.Errorf("libxfer: object: "+format+": %w", append(a, errObject)...)
	}
	if len(b) > maxObjectJSON {
		return bad("%d bytes of JSON: at most %d", len(b), maxObjectJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return bad("malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("data after the JSON value")
	}
	v, err := plainFromJSON(v, 1)
	if err != nil {
		return nil, err
	}
	return connector.EncodeObject(v)
}

// plainFromJSON turns JSON numbers into int64, uint64 or float64 and
// checks the limits the connector's decoder enforces, so that what is put
// can be got.
func plainFromJSON(v any, depth int) (any, error) {
	if depth > connector.MaxObjectNesting {
		return nil, fmt.Errorf("libxfer: object: nested deeper than %d levels: %w", connector.MaxObjectNesting, errObject)
	}
	switch v := v.(type) {
	case json.Number:
		s := string(v)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return u, nil
		}
		if bytes.ContainsAny([]byte(s), ".eE") {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("libxfer: object: number %s: %v: %w", s, err, errObject)
			}
			return f, nil
		}
		return nil, fmt.Errorf("libxfer: object: integer %s: beyond 64 bits: %w", s, errObject)
	case []any:
		if len(v) > connector.MaxObjectElements {
			return nil, fmt.Errorf("libxfer: object: an array of %d items: at most %d: %w", len(v), connector.MaxObjectElements, errObject)
		}
		for i, e := range v {
			var err error
			if v[i], err = plainFromJSON(e, depth+1); err != nil {
				return nil, err
			}
		}
		return v, nil
	case map[string]any:
		if len(v) > connector.MaxObjectElements {
			return nil, fmt.Errorf("libxfer: object: a map of %d pairs: at most %d: %w", len(v), connector.MaxObjectElements, errObject)
		}
		for k, e := range v {
			var err error
			if v[k], err = plainFromJSON(e, depth+1); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	return v, nil // string, bool, nil
}

// objectFromPickle wraps pickled bytes in pickleTag.
func objectFromPickle(b []byte) ([]byte, error) {
	return connector.EncodeObject(cbor.Tag{Number: pickleTag, Content: b})
}

// objectToJSON decodes the connector's CBOR in b (with its limits) and
// returns it as JSON, or, for a pickled object, the pickle's bytes with
// pickled set. Data JSON cannot carry (byte strings, maps with keys that
// are not strings, NaN, other tags) is an error matching errObject.
func objectToJSON(b []byte) (out []byte, pickled bool, err error) {
	var v any
	if err := connector.DecodeObject(b, &v); err != nil {
		return nil, false, err
	}
	if t, ok := v.(cbor.Tag); ok && t.Number == pickleTag {
		p, ok := t.Content.([]byte)
		if !ok {
			return nil, false, fmt.Errorf("libxfer: object: a pickle tag on a %T, not a byte string: %w", t.Content, errObject)
		}
		return p, true, nil
	}
	if v, err = plainToJSON(v); err != nil {
		return nil, false, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, false, fmt.Errorf("libxfer: object: %v: %w", err, errObject)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), false, nil
}

func plainToJSON(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, string, int64, uint64:
		return v, nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("libxfer: object: the float %v has no JSON form: %w", v, errObject)
		}
		return v, nil
	case []any:
		for i, e := range v {
			var err error
			if v[i], err = plainToJSON(e); err != nil {
				return nil, err
			}
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("libxfer: object: a map key of type %T: plain data has string keys: %w", k, errObject)
			}
			var err error
			if m[ks], err = plainToJSON(e); err != nil {
				return nil, err
			}
		}
		return m, nil
	case []byte:
		return nil, fmt.Errorf("libxfer: object: a byte string of %d bytes inside an object: plain data has none (put bytes as a value of their own): %w", len(v), errObject)
	}
	return nil, fmt.Errorf("libxfer: object: a CBOR value of type %T: not plain data: %w", v, errObject)
}

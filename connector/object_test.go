package connector

import (
	"errors"
	"reflect"
	"testing"
)

type sample struct {
	Name   string
	Step   int
	Scores []float64
	Tags   map[string]string
	Raw    []byte
}

func TestObjectRoundTrip(t *testing.T) {
	in := sample{Name: "stage-1", Step: 42, Scores: []float64{0.5, 1.5}, Tags: map[string]string{"a": "b"}, Raw: []byte{1, 2, 3}}
	b, err := EncodeObject(in)
	if err != nil {
		t.Fatal(err)
	}
	var out sample
	if err := DecodeObject(b, &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// Deterministic: the same value encodes to the same bytes.
	b2, _ := EncodeObject(in)
	if string(b) != string(b2) {
		t.Fatal("two encodings of one value differ")
	}
}

func TestObjectMalformed(t *testing.T) {
	var v any
	for name, b := range map[string][]byte{
		"empty":               {},
		"truncated":           {0x83, 0x01, 0x02},             // an array of 3 with 2 items
		"huge array":          {0x9b, 0, 0, 0, 1, 0, 0, 0, 0}, // 2^32 items claimed, none there
		"trailing":            {0x01, 0x02},
		"indefinite":          {0x9f, 0x01, 0xff},
		"duplicate keys":      {0xa2, 0x61, 'a', 0x01, 0x61, 'a', 0x02},
		"too deep":            append(repeat(0x81, MaxObjectNesting+2), 0x01),
		"reserved additional": {0x1c},
	} {
		if err := DecodeObject(b, &v); !errors.Is(err, ErrObject) {
			t.Errorf("%s: %v, want ErrObject", name, err)
		}
	}
}

func repeat(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func FuzzDecodeObject(f *testing.F) {
	b, _ := EncodeObject(sample{Name: "x", Scores: []float64{1}, Tags: map[string]string{"k": "v"}})
	f.Add(b)
	f.Add([]byte{0x9b, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if err := DecodeObject(b, &v); err != nil {
			if !errors.Is(err, ErrObject) {
				t.Fatalf("error %v does not match ErrObject", err)
			}
			return
		}
		var s sample
		_ = DecodeObject(b, &s) // into a struct: no panic either way
	})
}

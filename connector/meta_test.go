package connector

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{Producer: "10.0.0.1:15500", Key: "req-1/stage-2", Size: 24, Kind: KindTensor, DType: F32, Shape: []int64{2, 3}},
		{Producer: "127.0.0.1:15500", Key: "k", Size: 4, Kind: KindTensor, DType: I32}, // 0-dim
		{Producer: "", Key: "bytes", Size: 0, Kind: KindBytes},
		{Producer: "h:1", Key: "obj", Size: 99, Kind: KindObject},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		var back Meta
		if err := back.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(back, m) {
			t.Errorf("binary round trip of %+v: %+v, %v", m, back, err)
		}
		js, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var jback Meta
		if err := json.Unmarshal(js, &jback); err != nil || !reflect.DeepEqual(jback, m) {
			t.Errorf("JSON round trip of %s: %+v, %v", js, jback, err)
		}
	}
}

func TestMetaInvalid(t *testing.T) {
	for name, m := range map[string]Meta{
		"no kind":         {Key: "k", Kind: 0},
		"no key":          {Kind: KindBytes},
		"long key":        {Key: strings.Repeat("k", MaxKeyLen+1), Kind: KindBytes},
		"negative size":   {Key: "k", Size: -1, Kind: KindBytes},
		"tensor size":     {Key: "k", Size: 5, Kind: KindTensor, DType: F32, Shape: []int64{2}},
		"tensor no dtype": {Key: "k", Size: 0, Kind: KindTensor, Shape: []int64{0}},
		"shape on bytes":  {Key: "k", Size: 8, Kind: KindBytes, Shape: []int64{8}},
		"long producer":   {Key: "k", Kind: KindBytes, Producer: strings.Repeat("p", MaxProducerLen+1)},
	} {
		if _, err := m.MarshalBinary(); !errors.Is(err, ErrMeta) {
			t.Errorf("%s: %v, want ErrMeta", name, err)
		}
	}
	good, _ := Meta{Producer: "h:1", Key: "k", Size: 8, Kind: KindTensor, DType: U8, Shape: []int64{8}}.MarshalBinary()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte{}, good...), 0),
		"dims":      {metaVersion, byte(KindTensor), byte(U8), 0, MaxDims + 1},
		"overlong":  {metaVersion, byte(KindBytes), 0, 0x80, 0x00, 0, 0, 1, 'k'},
	} {
		var m Meta
		if err := m.UnmarshalBinary(b); !errors.Is(err, ErrMeta) {
			t.Errorf("%s: %v, want ErrMeta", name, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := Meta{Producer: "127.0.0.1:15500", Key: "k", Size: 24, Kind: KindTensor, DType: F32, Shape: []int64{2, 3}}.MarshalBinary()
	f.Add(good)
	f.Add([]byte{metaVersion, byte(KindBytes), 0, 0, 0, 0, 1, 'k'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Meta
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrMeta) {
				t.Fatalf("error %v does not match ErrMeta", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil || string(again) != string(b) {
			t.Fatalf("a decoded Meta does not encode back to its input: %x, %v", again, err)
		}
	})
}

// TestDecodeMetaAllocs: decoding allocates what the Meta holds (its
// producer, its key and its shape) and nothing more: no varint check, no
// field name that only an error would need.
func TestDecodeMetaAllocs(t *testing.T) {
	m := Meta{Producer: "10.0.0.1:5000", Key: "layer/3/kv", Size: 2048, Kind: KindTensor, DType: DType(1), Shape: []int64{2, 512}}
	b, err := m.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out Meta
	if n := testing.AllocsPerRun(100, func() {
		if err := out.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
	}); n > 3 {
		t.Errorf("decoding a Meta: %v allocations, want 3 (producer, key, shape)", n)
	}
	if out.Key != m.Key || out.Producer != m.Producer || len(out.Shape) != 2 || out.Shape[1] != 512 {
		t.Errorf("decoded %+v, want %+v", out, m)
	}
}

package connector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"unsafe"
)

func TestDTypes(t *testing.T) {
	for d := F16; d <= Bool; d++ {
		b, err := d.MarshalText()
		if err != nil || d.Size() == 0 {
			t.Fatalf("%d: %v, size %d", d, err, d.Size())
		}
		var back DType
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("%s: parsed back as %v, %v", b, back, err)
		}
	}
	for s, want := range map[string]DType{"float32": F32, "bfloat16": BF16, "half": F16, "bool": Bool, "uint64": U64, " i8 ": I8} {
		if d, err := ParseDType(s); err != nil || d != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", s, d, err, want)
		}
	}
	if _, err := ParseDType("complex64"); err == nil {
		t.Error("complex64 parsed")
	}
	if _, err := DType(0).MarshalText(); err == nil {
		t.Error("dtype 0 marshalled")
	}
}

func TestShapes(t *testing.T) {
	for _, c := range []struct {
		shape []int64
		n     int64
		ok    bool
	}{
		{nil, 1, true},              // 0-dim: one element
		{[]int64{1}, 1, true},       // one element
		{[]int64{0}, 0, true},       // empty
		{[]int64{3, 0, 5}, 0, true}, // empty
		{[]int64{2, 3, 4}, 24, true},
		{[]int64{-1}, 0, false},
		{[]int64{math.MaxInt64, 2}, 0, false},
		{make([]int64, MaxDims+1), 0, false},
	} {
		n, err := Elements(c.shape)
		if (err == nil) != c.ok || (c.ok && n != c.n) {
			t.Errorf("Elements(%v) = %d, %v", c.shape, n, err)
		}
		if err != nil && !errors.Is(err, ErrShape) {
			t.Errorf("Elements(%v): %v does not match ErrShape", c.shape, err)
		}
	}
	if _, err := ByteSize(F64, []int64{math.MaxInt64 / 4}); !errors.Is(err, ErrShape) {
		t.Errorf("an overflowing byte size: %v", err)
	}
	if err := (Tensor{DType: F32, Shape: []int64{2}, Data: make([]byte, 7)}).Check(); !errors.Is(err, ErrShape) {
		t.Errorf("7 bytes for two F32: %v", err)
	}
}

// aligned returns n bytes at an address aligned to 16.
func aligned(n int) []byte {
	b := make([]byte, n+16)
	off := (16 - int(uintptr(unsafe.Pointer(&b[0]))%16)) % 16
	return b[off : off+n : off+n]
}

func TestView(t *testing.T) {
	data := aligned(16)
	tn := Tensor{DType: F32, Shape: []int64{2, 2}, Data: data}
	f, err := View[float32](tn)
	if err != nil || len(f) != 4 {
		t.Fatalf("View[float32]: %d, %v", len(f), err)
	}
	f[3] = 1.5
	if got := math.Float32frombits(binary.LittleEndian.Uint32(data[12:])); got != 1.5 {
		t.Fatalf("the view does not alias the data: %v", got)
	}
	if _, err := View[int32](tn); !errors.Is(err, ErrShape) {
		t.Errorf("F32 viewed as int32: %v", err)
	}
	mis := Tensor{DType: F32, Shape: []int64{2}, Data: aligned(9)[1:]}
	if _, err := View[float32](mis); !errors.Is(err, ErrShape) {
		t.Errorf("a misaligned F32 view: %v", err)
	}
	if v, err := View[uint16](Tensor{DType: BF16, Shape: []int64{3}, Data: aligned(6)}); err != nil || len(v) != 3 {
		t.Errorf("BF16 as uint16: %d, %v", len(v), err)
	}
	if v, err := View[float64](Tensor{DType: F64, Shape: []int64{0, 4}, Data: nil}); err != nil || len(v) != 0 {
		t.Errorf("an empty F64 tensor: %v, %v", v, err)
	}
	if v, err := View[int64](Tensor{DType: I64, Data: aligned(8)}); err != nil || len(v) != 1 {
		t.Errorf("a 0-dim I64 tensor: %v, %v", v, err)
	}
	bools := Tensor{DType: Bool, Shape: []int64{3}, Data: []byte{0, 1, 2}}
	if _, err := View[bool](bools); !errors.Is(err, ErrShape) {
		t.Errorf("a BOOL byte of 2 viewed as bool: %v", err)
	}
	bools.Data[2] = 1
	if v, err := View[bool](bools); err != nil || !v[1] || v[0] {
		t.Errorf("BOOL view: %v, %v", v, err)
	}
}

func TestSafetensorsRoundTrip(t *testing.T) {
	in := map[string]Tensor{
		"w":     {DType: F32, Shape: []int64{2, 3}, Data: bytes.Repeat([]byte{1, 2, 3, 4}, 6)},
		"b":     {DType: BF16, Shape: []int64{3}, Data: []byte{1, 2, 3, 4, 5, 6}},
		"empty": {DType: I64, Shape: []int64{0}, Data: nil},
		"one":   {DType: U8, Shape: []int64{}, Data: []byte{7}},
	}
	file, err := EncodeSafetensors(in, map[string]string{"producer": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(file); (8+n)%8 != 0 {
		t.Errorf("data starts at %d, not 8-byte aligned", 8+n)
	}
	out, meta, err := DecodeSafetensors(file)
	if err != nil {
		t.Fatal(err)
	}
	if meta["producer"] != "test" || len(out) != len(in) {
		t.Fatalf("decoded %d tensors, meta %v", len(out), meta)
	}
	for name, want := range in {
		got := out[name]
		if got.DType != want.DType || len(got.Shape) != len(want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: %v %v %x, want %v %v %x", name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
	}
}

// TestSafetensorsGolden: the bytes of a small file as the format defines
// them (header length, JSON, data), so that what a Python reader expects
// is what is written.
func TestSafetensorsGolden(t *testing.T) {
	file, err := EncodeSafetensors(map[string]Tensor{"x": {DType: F32, Shape: []int64{2}, Data: []byte{0, 0, 128, 63, 0, 0, 0, 64}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	js := `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(js)+(8-len(js)%8)%8))
	want = append(want, js...)
	want = append(want, bytes.Repeat([]byte{' '}, (8-len(js)%8)%8)...)
	want = append(want, 0, 0, 128, 63, 0, 0, 0, 64) // 1.0, 2.0
	if !bytes.Equal(file, want) {
		t.Fatalf("encoded\n%q\nwant\n%q", file, want)
	}
}

func TestSafetensorsMalformed(t *testing.T) {
	hdr := func(js string, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
		return append(append(b, js...), make([]byte, data)...)
	}
	for name, b := range map[string][]byte{
		"short":         {1, 2, 3},
		"huge header":   binary.LittleEndian.AppendUint64(nil, 1<<40),
		"not json":      hdr("{", 0),
		"bad dtype":     hdr(`{"x":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, 8),
		"size mismatch": hdr(`{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8),
		"past the end":  hdr(`{"x":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}`, 8),
		"negative":      hdr(`{"x":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0),
		"overlap":       hdr(`{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8),
		"gap":           hdr(`{"x":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8),
		"no shape":      hdr(`{"x":{"dtype":"U8","data_offsets":[0,0]}}`, 0),
		"bad metadata":  hdr(`{"__metadata__":{"a":1}}`, 0),
	} {
		if _, _, err := DecodeSafetensors(b); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
}

func FuzzDecodeSafetensors(f *testing.F) {
	good, _ := EncodeSafetensors(map[string]Tensor{"a": {DType: I16, Shape: []int64{2}, Data: []byte{1, 2, 3, 4}}, "b": {DType: Bool, Data: []byte{1}}}, map[string]string{"k": "v"})
	f.Add(good)
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, meta, err := DecodeSafetensors(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not match ErrFormat", err)
			}
			return
		}
		// What decodes encodes again to a file that decodes to the same.
		again, err := EncodeSafetensors(ts, meta)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		ts2, _, err := DecodeSafetensors(again)
		if err != nil || len(ts2) != len(ts) {
			t.Fatalf("decode of the re-encoding: %d tensors, %v", len(ts2), err)
		}
		for name, x := range ts {
			if !bytes.Equal(ts2[name].Data, x.Data) || ts2[name].DType != x.DType {
				t.Fatalf("tensor %q changed in the round trip", name)
			}
		}
	})
}

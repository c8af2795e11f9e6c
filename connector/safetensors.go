package connector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// The safetensors format (Hugging Face's): an 8-byte little-endian header
// length N, N bytes of JSON mapping each tensor's name to its dtype, shape
// and [begin, end) offsets into the data that follows, and an optional
// "__metadata__" map of strings; then the data. Python reads it with
// safetensors.numpy.load_file or torch's safetensors.torch.load_file.

// MaxSafetensorsHeader bounds the JSON header that DecodeSafetensors
// accepts, as the reference implementation does.
const MaxSafetensorsHeader = 100 << 20

// ErrFormat matches errors about malformed safetensors data.
var ErrFormat = errors.New("malformed safetensors")

type stEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// AppendSafetensorsHeader appends the header of a safetensors file holding
// the named tensors, in name order, and returns it with the length of the
// data that must follow: each tensor's Data, in the same order. meta may
// be nil. The header is padded with spaces so that the data starts 8-byte
// aligned.
func AppendSafetensorsHeader(b []byte, tensors map[string]Tensor, meta map[string]string) ([]byte, int64, error) {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		if name == "__metadata__" {
			return nil, 0, fmt.Errorf("connector: a tensor may not be named __metadata__")
		}
		names = append(names, name)
	}
	sort.Strings(names)
	header := make(map[string]any, len(tensors)+1)
	var off int64
	for _, name := range names {
		t := tensors[name]
		if err := t.Check(); err != nil {
			return nil, 0, fmt.Errorf("tensor %q: %w", name, err)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		header[name] = stEntry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	js, err := json.Marshal(header)
	if err != nil {
		return nil, 0, err
	}
	pad := (8 - len(js)%8) % 8
	b = binary.LittleEndian.AppendUint64(b, uint64(len(js)+pad))
	b = append(b, js...)
	b = append(b, bytes.Repeat([]byte{' '}, pad)...)
	return b, off, nil
}

// EncodeSafetensors returns a whole safetensors file of the tensors.
func EncodeSafetensors(tensors map[string]Tensor, meta map[string]string) ([]byte, error) {
	b, n, err := AppendSafetensorsHeader(nil, tensors, meta)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	b = append(make([]byte, 0, len(b)+int(n)), b...)
	for _, name := range names {
		b = append(b, tensors[name].Data...)
	}
	return b, nil
}

// DecodeSafetensors parses a safetensors file. The tensors' Data alias b.
// Every offset is checked against the data, every shape against its dtype
// and byte range, and tensors may neither overlap nor leave gaps: malformed
// input is an error matching ErrFormat, never a panic, and the header is
// bounded by MaxSafetensorsHeader.
func DecodeSafetensors(b []byte) (map[string]Tensor, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("connector: %d bytes, shorter than the 8-byte header length: %w", len(b), ErrFormat)
	}
	n := binary.LittleEndian.Uint64(b)
	if n > MaxSafetensorsHeader || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("connector: header of %d bytes in %d: %w", n, len(b), ErrFormat)
	}
	hdr, data := b[8:8+n], b[8+n:]
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, nil, fmt.Errorf("connector: header: %v: %w", err, ErrFormat)
	}
	var meta map[string]string
	type span struct {
		begin, end int64
		name       string
	}
	var spans []span
	tensors := make(map[string]Tensor, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("connector: __metadata__: %v: %w", err, ErrFormat)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("connector: tensor %q: %v: %w", name, err, ErrFormat)
		}
		if e.Shape == nil {
			return nil, nil, fmt.Errorf("connector: tensor %q: no shape: %w", name, ErrFormat)
		}
		size, err := ByteSize(e.DType, e.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w: %w", name, err, ErrFormat)
		}
		begin, end := e.DataOffsets[0], e.DataOffsets[1]
		if begin < 0 || end < begin || end > int64(len(data)) || end-begin != size {
			return nil, nil, fmt.Errorf("connector: tensor %q: data_offsets [%d, %d) for %d bytes in %d: %w", name, begin, end, size, len(data), ErrFormat)
		}
		tensors[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[begin:end:end]}
		spans = append(spans, span{begin, end, name})
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].begin < spans[j].begin || spans[i].begin == spans[j].begin && spans[i].end < spans[j].end
	})
	var at int64
	for _, s := range spans {
		if s.begin != at {
			return nil, nil, fmt.Errorf("connector: tensor %q starts at %d, not %d: overlapping or gapped data: %w", s.name, s.begin, at, ErrFormat)
		}
		at = s.end
	}
	if at != int64(len(data)) {
		return nil, nil, fmt.Errorf("connector: %d bytes of data after the last tensor: %w", int64(len(data))-at, ErrFormat)
	}
	return tensors, meta, nil
}

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed message")

// enc appends little-endian fields to a byte slice.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) raw(v []byte) { e.b = append(e.b, v...) }

// bytes16 writes a length-prefixed byte string of at most 65535 bytes.
func (e *enc) bytes16(v []byte) {
	if len(v) > 0xffff {
		v = v[:0xffff]
	}
	e.u16(uint16(len(v)))
	e.b = append(e.b, v...)
}

func (e *enc) str(s string) { e.bytes16([]byte(s)) }

// dec reads fields from a byte slice; the first short read sets err and every
// later read returns zero values.
type dec struct {
	b    []byte
	err  error
	what string
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s: %s", ErrMalformed, d.what, fmt.Sprintf(format, args...))
	}
}

func (d *dec) take(n int, field string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.fail("truncated at %s (need %d bytes, have %d)", field, n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8(field string) uint8 {
	if v := d.take(1, field); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u16(field string) uint16 {
	if v := d.take(2, field); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *dec) u32(field string) uint32 {
	if v := d.take(4, field); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *dec) u64(field string) uint64 {
	if v := d.take(8, field); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *dec) fixed(dst []byte, field string) {
	if v := d.take(len(dst), field); v != nil {
		copy(dst, v)
	}
}

// bytes16 reads a length-prefixed byte string of at most max bytes and
// returns a copy.
func (d *dec) bytes16(max int, field string) []byte {
	n := int(d.u16(field + " length"))
	if d.err == nil && n > max {
		d.fail("%s is %d bytes, limit %d", field, n, max)
		return nil
	}
	v := d.take(n, field)
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *dec) str(max int, field string) string { return string(d.bytes16(max, field)) }

// done fails unless every byte was consumed.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/xferio/xfer"
)

// A Mooncake engine's segment table: the ranges of its memory registered
// for peers, which an initiator reads (an xfer READ of the exported table
// region) to map a raw address in the target's address space to a region
// and an offset, as Mooncake's segment descriptor lists a segment's
// buffers.
//
// The layout, little-endian:
//
//	magic  u32  segMagic
//	count  u32  the number of entries
//	crc    u32  CRC-32 (IEEE) of the count entries
//	gen    u32  bumped by every change
//	count × xfer.RegionDescLen bytes: each range's RegionDesc (binary form)
//
// The owner rewrites it in place while peers may read it: a reader that
// finds the CRC wrong read it mid-change and reads it again.
const (
	segMagic     = 0x53434d58 // "XMCS"
	segHeaderLen = 16
	// segTableLen is the table region's size, which bounds the number of
	// ranges an engine registers at once (segMaxEntries).
	segTableLen   = 256 << 10
	segMaxEntries = (segTableLen - segHeaderLen) / xfer.RegionDescLen
	// segExport is the name the table region is exported under.
	segExport = "mooncake.segment"
)

// errTorn marks a table read while its owner changed it.
var errTorn = errors.New("segment table: read mid-change")

// encodeSegment writes the table of descs, generation gen, into dst (at
// least segHeaderLen + len(descs)*RegionDescLen bytes): the entries first,
// the header last.
func encodeSegment(dst []byte, descs []xfer.RegionDesc, gen uint32) {
	b := dst[segHeaderLen:segHeaderLen]
	for _, d := range descs {
		b, _ = d.AppendBinary(b)
	}
	binary.LittleEndian.PutUint32(dst[0:], segMagic)
	binary.LittleEndian.PutUint32(dst[4:], uint32(len(descs)))
	binary.LittleEndian.PutUint32(dst[8:], crc32.ChecksumIEEE(b))
	binary.LittleEndian.PutUint32(dst[12:], gen)
}

// segmentCount reads the header's entry count, checking the magic number.
func segmentCount(b []byte) (int, error) {
	if len(b) < segHeaderLen {
		return 0, fmt.Errorf("segment table: %d bytes, shorter than its %d-byte header", len(b), segHeaderLen)
	}
	if m := binary.LittleEndian.Uint32(b); m != segMagic {
		return 0, fmt.Errorf("segment table: magic %#x, want %#x (the peer is not an xfer Mooncake engine)", m, segMagic)
	}
	n := binary.LittleEndian.Uint32(b[4:])
	if n > segMaxEntries {
		return 0, fmt.Errorf("segment table: %d entries, at most %d", n, segMaxEntries)
	}
	return int(n), nil
}

// decodeSegment decodes a table read from a peer: errTorn when its CRC
// does not match (read mid-change: read it again), another error when it
// is malformed.
func decodeSegment(b []byte) ([]xfer.RegionDesc, error) {
	n, err := segmentCount(b)
	if err != nil {
		return nil, err
	}
	end := segHeaderLen + n*xfer.RegionDescLen
	if len(b) < end {
		return nil, fmt.Errorf("segment table: %d entries need %d bytes, have %d", n, end, len(b))
	}
	if crc32.ChecksumIEEE(b[segHeaderLen:end]) != binary.LittleEndian.Uint32(b[8:]) {
		return nil, errTorn
	}
	out := make([]xfer.RegionDesc, n)
	for i := range out {
		off := segHeaderLen + i*xfer.RegionDescLen
		if err := out[i].UnmarshalBinary(b[off : off+xfer.RegionDescLen]); err != nil {
			return nil, fmt.Errorf("segment table: entry %d: %w", i, err)
		}
		if d := out[i]; d.Len == 0 || d.Addr+d.Len < d.Addr {
			return nil, fmt.Errorf("segment table: entry %d: range [%#x, +%d) is empty or wraps", i, d.Addr, d.Len)
		}
	}
	return out, nil
}

// findRange returns the desc whose range holds [addr, addr+n), if any.
func findRange(descs []xfer.RegionDesc, addr, n uint64) (xfer.RegionDesc, bool) {
	if addr+n < addr {
		return xfer.RegionDesc{}, false
	}
	for _, d := range descs {
		if addr >= d.Addr && addr+n <= d.Addr+d.Len {
			return d, true
		}
	}
	return xfer.RegionDesc{}, false
}

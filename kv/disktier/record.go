package disktier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Block is the unit of the file's layout and of every read and write: the
// alignment O_DIRECT asks of offsets, lengths and buffers.
const Block = 4096

// The file's layout:
//
//	[0, 2 Block)  two superblocks, written in turn (the newest valid one wins)
//	[2 Block, N)  the ring of records
//
// A record is a header, padded to whole blocks, then the value, padded to
// whole blocks:
//
//	0  magic u32 · 4 format u16 · 6 flags u16 · 8 file ID u64 · 16 epoch u64
//	24 seq u64 · 32 version u64 · 40 key length u32 · 44 replicas u8 ·
//	45 pad [3] · 48 value length u64 · 56 value CRC u32 · 60 header CRC u32 ·
//	64 key
//
// The header's CRC (CRC-32C) covers bytes 0 to 60 and the key, the value's
// CRC the value's bytes. A header is trusted only with its magic, format,
// this file's random ID and current epoch and its CRC: a value's bytes that
// happen to look like a header do not name this file's ID, which no client
// sees.
const (
	recMagic   = 0x444b5658 // "XVKD" little-endian
	superMagic = 0x534b5658 // "XVKS"
	format     = 1
	hdrFixed   = 64
	dataStart  = 2 * Block
	flagTomb   = 1 // a tombstone: the key has no value from before this record
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is a record's header, decoded.
type Header struct {
	FileID, Epoch, Seq, Ver uint64
	Key                     []byte
	Reps                    uint8
	Tomb                    bool
	N                       uint64 // the value's length
	ValCRC                  uint32
}

// hdrLen is the length of a header with a key of k bytes, in whole blocks.
func hdrLen(k int) int64 { return roundUp(int64(hdrFixed + k)) }

func roundUp(n int64) int64 { return (n + Block - 1) &^ (Block - 1) }

// recLen is the length of the record of h.
func (h *Header) recLen() int64 { return hdrLen(len(h.Key)) + roundUp(int64(h.N)) }

// encodeHeader writes h into b, which holds hdrLen(len(h.Key)) bytes.
func encodeHeader(b []byte, h *Header) {
	clear(b[:hdrLen(len(h.Key))])
	le := binary.LittleEndian
	le.PutUint32(b[0:], recMagic)
	le.PutUint16(b[4:], format)
	var flags uint16
	if h.Tomb {
		flags |= flagTomb
	}
	le.PutUint16(b[6:], flags)
	le.PutUint64(b[8:], h.FileID)
	le.PutUint64(b[16:], h.Epoch)
	le.PutUint64(b[24:], h.Seq)
	le.PutUint64(b[32:], h.Ver)
	le.PutUint32(b[40:], uint32(len(h.Key)))
	b[44] = h.Reps
	le.PutUint64(b[48:], h.N)
	le.PutUint32(b[56:], h.ValCRC)
	copy(b[hdrFixed:], h.Key)
	crc := crc32.Update(crc32.Checksum(b[:60], castagnoli), castagnoli, h.Key)
	le.PutUint32(b[60:], crc)
}

// Errors of DecodeHeader: a block that holds no header, and one that does
// but fails its checks.
var (
	errNoHeader  = errors.New("no record header")
	errBadHeader = errors.New("corrupt record header")
)

// MaxKey is the longest key a record holds.
const MaxKey = 1 << 20

// DecodeHeader decodes the header at the start of b, which holds at least
// the header's first block (more when the key runs past it: need says how
// many bytes). It checks the magic, the format and the header's CRC, not
// the file ID or epoch (the caller's) nor the value.
func DecodeHeader(b []byte) (h Header, need int, err error) {
	if len(b) < hdrFixed {
		return h, hdrFixed, errNoHeader
	}
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != recMagic {
		return h, 0, errNoHeader
	}
	if v := le.Uint16(b[4:]); v != format {
		return h, 0, fmt.Errorf("%w: format %d", errBadHeader, v)
	}
	flags := le.Uint16(b[6:])
	if flags&^flagTomb != 0 || b[45]|b[46]|b[47] != 0 {
		return h, 0, fmt.Errorf("%w: flags %#x", errBadHeader, flags)
	}
	k := le.Uint32(b[40:])
	if k == 0 || k > MaxKey {
		return h, 0, fmt.Errorf("%w: key of %d bytes", errBadHeader, k)
	}
	if n := hdrFixed + int(k); len(b) < n {
		return h, int(hdrLen(int(k))), errNoHeader
	}
	key := b[hdrFixed : hdrFixed+int(k)]
	if crc := crc32.Update(crc32.Checksum(b[:60], castagnoli), castagnoli, key); crc != le.Uint32(b[60:]) {
		return h, 0, fmt.Errorf("%w: checksum", errBadHeader)
	}
	h = Header{FileID: le.Uint64(b[8:]), Epoch: le.Uint64(b[16:]), Seq: le.Uint64(b[24:]), Ver: le.Uint64(b[32:]),
		Key: key, Reps: b[44], Tomb: flags&flagTomb != 0, N: le.Uint64(b[48:]), ValCRC: le.Uint32(b[56:])}
	if h.N > 1<<48 || (h.Tomb && h.N != 0) {
		return h, 0, fmt.Errorf("%w: value of %d bytes", errBadHeader, h.N)
	}
	return h, 0, nil
}

// super is a superblock: the file's identity and epoch.
type super struct {
	fileID, epoch uint64
	size          int64
}

func encodeSuper(b []byte, s super) {
	clear(b[:Block])
	le := binary.LittleEndian
	le.PutUint32(b[0:], superMagic)
	le.PutUint16(b[4:], format)
	le.PutUint64(b[8:], s.fileID)
	le.PutUint64(b[16:], s.epoch)
	le.PutUint64(b[24:], uint64(s.size))
	le.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
}

func decodeSuper(b []byte) (super, bool) {
	le := binary.LittleEndian
	if len(b) < 36 || le.Uint32(b[0:]) != superMagic || le.Uint16(b[4:]) != format ||
		le.Uint32(b[32:]) != crc32.Checksum(b[:32], castagnoli) {
		return super{}, false
	}
	return super{fileID: le.Uint64(b[8:]), epoch: le.Uint64(b[16:]), size: int64(le.Uint64(b[24:]))}, true
}

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// One direction of an endpoint's message ring (msgs.go): a memfd that the
// receiving side creates and the sending side maps with pidfd_getfd. Its
// first page holds the control words, each on a cache line of its own;
// the rest is the data, a power of two of bytes, holding entries back to
// back. Tail and head count bytes since the start, never wrapping: the
// entries published are data[head%size : tail%size], wrapped.
//
// An entry is an 8-byte header, the payload length (uint32, little-endian)
// and the kind (one byte, then three zero bytes), and the payload, padded
// to a multiple of 8 bytes. An entry never wraps: when one does not fit
// before the end of the data, the writer fills the rest with a padding
// entry and starts again at offset 0. Only the writer stores the tail and
// only the reader the head; each keeps its own copy and never trusts the
// other's word beyond a check (ringError otherwise).
const (
	ringHeader   = 4096 // the control page
	offTail      = 0    // uint64: bytes published by the writer
	offHead      = 64   // uint64: bytes consumed by the reader
	offSleep     = 128  // uint32: 1 while the reader sleeps on its doorbell
	offWantSpace = 192  // uint32: 1 while the writer waits for the reader to free space

	entryHeader = 8
	notifyLen   = 24 // value, region (uint32), addr, len (uint64)

	// minRingData and maxRingData bound the data of one direction. It is
	// twice the largest entry (a message of max_message bytes), at least
	// minRingData; a connection whose max_message needs more than
	// maxRingData sends its messages over the control stream.
	minRingData = 64 << 10
	maxRingData = 4 << 20
)

// The kinds of entry.
const (
	kindSend   = 1 // a message (OpSend or AppendSend)
	kindNotify = 2 // the notification of a write-with-notify
	kindPad    = 3 // the rest of the data, before the writer wrapped
)

// errRing marks a malformed ring from the peer.
var errRing = errors.New("malformed message ring")

// ringSize returns the data size for messages of up to maxMsg bytes, or 0
// when that would exceed maxRingData.
func ringSize(maxMsg int) uint64 {
	need := uint64(2 * align8(entryHeader+maxMsg))
	size := uint64(minRingData)
	for size < need {
		size <<= 1
	}
	if size > maxRingData {
		return 0
	}
	return size
}

func align8(n int) int { return (n + 7) &^ 7 }

// ring is one direction mapped: mem is the whole mapping, data the part
// after the control page.
type ring struct {
	mem  []byte
	data []byte
	mask uint64
}

func newRing(mem []byte) ring {
	data := mem[ringHeader:]
	return ring{mem: mem, data: data, mask: uint64(len(data)) - 1}
}

func (r *ring) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *ring) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

func (r *ring) size() uint64 { return uint64(len(r.data)) }

// decodeEntry reads the entry at the start of b, the published bytes from
// the reader's position up to the end of the data: its kind and payload.
// maxMsg bounds a message's payload.
func decodeEntry(b []byte, maxMsg int) (kind byte, payload []byte, err error) {
	if len(b) < entryHeader {
		return 0, nil, fmt.Errorf("%w: entry header cut off: %d bytes published", errRing, len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	kind = b[4]
	switch kind {
	case kindSend:
		if n > uint64(maxMsg) {
			return 0, nil, fmt.Errorf("%w: message of %d bytes, max_message is %d", errRing, n, maxMsg)
		}
	case kindNotify:
		if n != notifyLen {
			return 0, nil, fmt.Errorf("%w: notification of %d bytes, not %d", errRing, n, notifyLen)
		}
	case kindPad:
	default:
		return 0, nil, fmt.Errorf("%w: entry of unknown kind %d", errRing, kind)
	}
	if n > uint64(len(b)-entryHeader) {
		return 0, nil, fmt.Errorf("%w: entry of %d bytes overruns the %d published", errRing, n, len(b)-entryHeader)
	}
	return kind, b[entryHeader : entryHeader+int(n)], nil
}

// next returns the entry at head and its size in the ring (header and
// padding included); size 0 when none is published.
func (r *ring) next(head uint64, maxMsg int) (kind byte, payload []byte, size uint64, err error) {
	tail := atomic.LoadUint64(r.u64(offTail))
	avail := tail - head
	if avail == 0 {
		return 0, nil, 0, nil
	}
	if avail > r.size() || avail%8 != 0 {
		return 0, nil, 0, fmt.Errorf("%w: tail %d with head %d in a ring of %d bytes", errRing, tail, head, r.size())
	}
	pos := head & r.mask
	end := min(r.size(), pos+avail)
	kind, payload, err = decodeEntry(r.data[pos:end], maxMsg)
	if err != nil {
		return 0, nil, 0, err
	}
	size = uint64(align8(entryHeader + len(payload)))
	if kind == kindPad && pos+size != r.size() {
		return 0, nil, 0, fmt.Errorf("%w: padding of %d bytes at %d does not end the ring of %d", errRing, size, pos, r.size())
	}
	return kind, payload, size, nil
}

// published reports whether entries are published past head.
func (r *ring) published(head uint64) bool { return atomic.LoadUint64(r.u64(offTail)) != head }

// consume frees everything before head for the writer.
func (r *ring) consume(head uint64) { atomic.StoreUint64(r.u64(offHead), head) }

// reserve finds room at tail for an entry of up to n payload bytes. It
// returns the payload's room (n bytes) and where the entry starts, or
// ok false when the ring lacks space. It writes nothing: commit does.
func (r *ring) reserve(tail uint64, n int) (room []byte, at uint64, ok bool, err error) {
	head := atomic.LoadUint64(r.u64(offHead))
	used := tail - head
	if used > r.size() || used%8 != 0 {
		return nil, 0, false, fmt.Errorf("%w: head %d with tail %d in a ring of %d bytes", errRing, head, tail, r.size())
	}
	need := uint64(align8(entryHeader + n))
	pos := tail & r.mask
	at = tail
	if pos+need > r.size() {
		at += r.size() - pos // padding first
		pos = 0
	}
	if at+need-head > r.size() {
		return nil, 0, false, nil
	}
	return r.data[pos+entryHeader : pos+entryHeader+uint64(n)], at, true, nil
}

// commit publishes the entry reserved at at, with n payload bytes already
// in its room, and returns the new tail.
func (r *ring) commit(tail, at uint64, kind byte, n int) uint64 {
	if at != tail {
		pos := tail & r.mask
		putEntryHeader(r.data[pos:], kindPad, int(r.size()-pos)-entryHeader)
	}
	putEntryHeader(r.data[at&r.mask:], kind, n)
	tail = at + uint64(align8(entryHeader+n))
	atomic.StoreUint64(r.u64(offTail), tail)
	return tail
}

func putEntryHeader(b []byte, kind byte, n int) {
	binary.LittleEndian.PutUint32(b, uint32(n))
	b[4], b[5], b[6], b[7] = kind, 0, 0, 0
}

// hasSpace reports whether an entry of n payload bytes would fit at tail.
func (r *ring) hasSpace(tail uint64, n int) bool {
	_, _, ok, _ := r.reserve(tail, n)
	return ok
}

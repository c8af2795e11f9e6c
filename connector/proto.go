package connector

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/xferio/xfer"
)

// The control protocol. A consumer and a producer talk with the engine's
// own two-sided messages (Peer.Send, Peer.Handle) over the connection the
// consumer dialed: no port or library of its own. Every message starts with
// its type; integers are little-endian.
//
//	get     consumer → producer  id, flags, key, [dest: region, addr, key, len],
//	                             [releases: count, then id and taken each]
//	info    producer → consumer  id, status, then meta and source (ok), meta
//	                             and the value (value) or a message
//	release consumer → producer  id, taken
//	cancel  consumer → producer  id
//	sync    consumer → producer  id, answered by an info with statusSynced
//
// A get claims the slot for the consumer (or waits for the key to be put).
// Under PullRead the info answer carries the slot's address and the consumer
// READs it; under PullWrite the get carries the consumer's buffer and the
// producer WRITEs the value into it, the last piece with a notification
// whose value is the request's id. Either way the consumer ends its claim
// with a release, which says whether it took the value: a slot is counted
// as consumed only then, so a consumer that fails or gives up never uses up
// another consumer's turn.
//
// A get with the inline flag takes a small value (at most inlineMax bytes,
// the whole answer at most maxControl) in the answer itself, whichever way
// the consumer pulls: the info's status is value, and the metadata and the
// value follow. The producer sends it from its receive path, so a small
// value costs one message each way and no one-sided operation; the claim
// and its release are as for any other get.
//
// A get may carry the releases of the consumer's earlier gets to the same
// producer (flagReleases): a consumer holds a release back until its next
// get, or for at most releaseDelay, so that a stream of gets sends one
// message each way per get. The producer ends those claims before it looks
// at the get itself, as if the releases had come first.
//
// A consumer that closes first syncs with each producer: the answer comes
// after the producer has handled every message the consumer sent before it
// (messages arrive in order), so no release is lost to the connection
// going down.
const (
	msgGet     = 1
	msgInfo    = 2
	msgRelease = 3
	msgCancel  = 4
	msgSync    = 5
)

// Flags of a get.
const (
	flagNoWait    = 1 << iota // answer not-found at once instead of waiting for the key
	flagDest                  // the consumer's buffer follows: write the value into it
	flagWantWrite             // the consumer will pull by write but does not know the size: answer with the metadata
	flagInline                // a value of at most inlineMax bytes may come in the answer (statusValue)
	flagReleases              // releases of earlier gets follow the get's own fields
)

// maxCarried bounds the releases one get carries.
const maxCarried = 32

// carriedLen is the bytes of one carried release: id, taken.
const carriedLen = 5

// Status of an info answer.
const (
	statusOK       = 0 // meta and source follow
	statusNeedDest = 1 // meta follows; ask again with a buffer of meta.Size bytes
	statusNotFound = 2
	statusClosed   = 3 // the producer is closing
	statusFailed   = 4 // the message says why
	statusRefused  = 5 // a malformed or unacceptable request; the message says why
	statusSynced   = 6 // the answer to a sync; an empty message follows
	statusValue    = 7 // meta and the value itself follow (a get with flagInline)
)

// maxControl bounds a control message: a get with the longest key and
// a destination, or an info with the largest metadata.
const maxControl = 8 << 10

// inlineMax is the largest value a producer sends inline, in the answer to
// a get with flagInline, when the answer fits maxControl.
const inlineMax = 4 << 10

// errControl matches malformed control messages.
var errControl = errors.New("malformed control message")

// request is a decoded get, release or cancel.
type request struct {
	typ     byte
	id      uint32
	flags   byte
	key     string
	dest    xfer.RemoteAddr
	destLen uint64
	taken   bool
	// rels are the releases a get carries (flagReleases), carriedLen
	// bytes each, in the message (checked: ranged over by eachRelease).
	rels []byte
}

// eachRelease calls f for each release the get r carries, in order.
func (r *request) eachRelease(f func(id uint32, taken bool)) {
	for b := r.rels; len(b) >= carriedLen; b = b[carriedLen:] {
		f(binary.LittleEndian.Uint32(b), b[4] == 1)
	}
}

// reply is a decoded info answer.
type reply struct {
	id     uint32
	status byte
	meta   Meta
	src    xfer.RemoteAddr
	msg    string
	// data is a statusValue answer's value: in the message, until
	// the consumer copies it out (remote.deliver).
	data []byte
}

func appendGet(b []byte, id uint32, flags byte, key string, dest xfer.RemoteAddr, destLen uint64) []byte {
	b = append(b, msgGet)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	if flags&flagDest != 0 {
		b = appendRemote(b, dest)
		b = binary.LittleEndian.AppendUint64(b, destLen)
	}
	return b
}

// appendCarried makes the get in b carry rels, carriedLen bytes a
// release (appendCarriedRelease), at most maxCarried of them.
func appendCarried(b []byte, rels []byte) []byte {
	b[5] |= flagReleases
	b = append(b, byte(len(rels)/carriedLen))
	return append(b, rels...)
}

// appendCarriedRelease appends one release for a get to carry.
func appendCarriedRelease(b []byte, id uint32, taken bool) []byte {
	b = binary.LittleEndian.AppendUint32(b, id)
	if taken {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendRelease(b []byte, id uint32, taken bool) []byte {
	b = append(b, msgRelease)
	b = binary.LittleEndian.AppendUint32(b, id)
	if taken {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendCancel(b []byte, id uint32) []byte {
	b = append(b, msgCancel)
	return binary.LittleEndian.AppendUint32(b, id)
}

func appendSync(b []byte, id uint32) []byte {
	b = append(b, msgSync)
	return binary.LittleEndian.AppendUint32(b, id)
}

// appendInfo appends an info answer. meta goes with statusOK and
// statusNeedDest, src with statusOK, msg with the others.
func appendInfo(b []byte, id uint32, status byte, meta *Meta, src xfer.RemoteAddr, msg string) ([]byte, error) {
	b = append(b, msgInfo)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = append(b, status)
	switch status {
	case statusOK, statusNeedDest, statusValue:
		at := len(b)
		b = append(b, 0, 0)
		var err error
		if b, err = meta.AppendBinary(b); err != nil {
			return nil, err
		}
		n := len(b) - at - 2
		if n > maxControl {
			return nil, fmt.Errorf("connector: metadata of %d bytes does not fit a control message", n)
		}
		binary.LittleEndian.PutUint16(b[at:], uint16(n))
		if status == statusOK {
			b = appendRemote(b, src)
		}
	default:
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(msg)))
		b = append(b, msg...)
	}
	return b, nil
}

// appendValue appends an info answer with statusValue: the metadata, then
// data with its length. It fails when the answer would not fit maxControl
// (inlineLen says beforehand).
func appendValue(b []byte, id uint32, meta *Meta, data []byte) ([]byte, error) {
	b, err := appendInfo(b, id, statusValue, meta, xfer.RemoteAddr{}, "")
	if err != nil {
		return nil, err
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...), nil
}

// inlineLen is the length of meta's statusValue answer with its value.
func inlineLen(meta *Meta) int {
	return 1 + 4 + 1 + 2 + meta.binaryLen() + 4 + int(meta.Size)
}

// infoLen bounds the length of an info answer (appendInfo) with status,
// meta and msg.
func infoLen(status byte, meta *Meta, msg string) int {
	switch status {
	case statusOK, statusNeedDest, statusValue:
		return 1 + 4 + 1 + 2 + meta.binaryLen() + 20
	}
	return 1 + 4 + 1 + 2 + min(len(msg), 1024)
}

// inlineOK reports whether a get with flags takes meta's value inline.
func inlineOK(flags byte, meta *Meta) bool {
	return flags&flagInline != 0 && meta.Size <= inlineMax && inlineLen(meta) <= maxControl
}

func appendRemote(b []byte, r xfer.RemoteAddr) []byte {
	b = binary.LittleEndian.AppendUint32(b, r.Region)
	b = binary.LittleEndian.AppendUint64(b, r.Addr)
	return binary.LittleEndian.AppendUint64(b, r.Key)
}

// decoder reads a control message, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("connector: control message: %s: %w", what, errControl)
	}
}

func (d *decoder) bytes(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("truncated " + what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) byte {
	if v := d.bytes(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16(what string) uint16 {
	if v := d.bytes(2, what); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if v := d.bytes(4, what); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if v := d.bytes(8, what); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) remote() xfer.RemoteAddr {
	return xfer.RemoteAddr{Region: d.u32("region"), Addr: d.u64("address"), Key: d.u64("key")}
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return d.err
}

// testNoInline makes producers refuse flagInline as unknown, as one from
// before inline values did (tests only).
var testNoInline atomic.Bool

// testNoCarried makes producers refuse flagReleases as unknown, as one
// from before carried releases did (tests only).
var testNoCarried atomic.Bool

// parseRequest decodes a message a producer receives.
func parseRequest(b []byte) (request, error) {
	d := decoder{b: b}
	r := request{typ: d.u8("type"), id: d.u32("id")}
	switch r.typ {
	case msgGet:
		r.flags = d.u8("flags")
		known := byte(flagNoWait | flagDest | flagWantWrite | flagInline | flagReleases)
		if testNoInline.Load() {
			known &^= flagInline | flagReleases // a producer from before inline values
		}
		if testNoCarried.Load() {
			known &^= flagReleases // a producer from before carried releases
		}
		if r.flags&^known != 0 {
			d.fail(fmt.Sprintf("unknown flags %#x", r.flags))
		}
		n := int(d.u16("key length"))
		if d.err == nil && (n == 0 || n > MaxKeyLen) {
			d.fail(fmt.Sprintf("key of %d bytes", n))
		}
		r.key = string(d.bytes(n, "key"))
		if r.flags&flagDest != 0 {
			r.dest = d.remote()
			r.destLen = d.u64("destination length")
		}
		if r.flags&flagReleases != 0 {
			n := int(d.u8("release count"))
			if d.err == nil && (n == 0 || n > maxCarried) {
				d.fail(fmt.Sprintf("%d carried releases", n))
			}
			r.rels = d.bytes(n*carriedLen, "releases")
			for b := r.rels; len(b) >= carriedLen && d.err == nil; b = b[carriedLen:] {
				if b[4] > 1 {
					d.fail("a carried release's taken is neither 0 nor 1")
				}
			}
		}
	case msgRelease:
		switch d.u8("taken") {
		case 0:
		case 1:
			r.taken = true
		default:
			d.fail("taken is neither 0 nor 1")
		}
	case msgCancel, msgSync:
	default:
		if d.err == nil {
			d.fail(fmt.Sprintf("unknown type %d", r.typ))
		}
	}
	return r, d.end()
}

// parseReply decodes a message a consumer receives.
func parseReply(b []byte) (reply, error) {
	d := decoder{b: b}
	if t := d.u8("type"); d.err == nil && t != msgInfo {
		d.fail(fmt.Sprintf("unknown type %d", t))
	}
	r := reply{id: d.u32("id"), status: d.u8("status")}
	switch r.status {
	case statusOK, statusNeedDest, statusValue:
		m := d.bytes(int(d.u16("metadata length")), "metadata")
		if d.err == nil {
			if err := r.meta.UnmarshalBinary(m); err != nil {
				d.err = fmt.Errorf("connector: control message: %w: %w", err, errControl)
			}
		}
		switch r.status {
		case statusOK:
			r.src = d.remote()
		case statusValue:
			n := d.u32("value length")
			if d.err == nil && (int64(n) != r.meta.Size || n > inlineMax) {
				d.fail(fmt.Sprintf("an inline value of %d bytes, for metadata of %d", n, r.meta.Size))
			}
			r.data = d.bytes(int(n), "value")
		}
	case statusNotFound, statusClosed, statusFailed, statusRefused, statusSynced:
		r.msg = string(d.bytes(int(d.u16("message length")), "message"))
	default:
		d.fail(fmt.Sprintf("unknown status %d", r.status))
	}
	return r, d.end()
}

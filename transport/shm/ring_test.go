package shm

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzDecodeEntry: whatever a peer writes into the ring, decodeEntry
// returns an error or an entry inside what was published, never panics.
func FuzzDecodeEntry(f *testing.F) {
	entry := func(kind byte, n int, extra int) []byte {
		b := make([]byte, entryHeader+n+extra)
		putEntryHeader(b, kind, n)
		return b
	}
	f.Add(entry(kindSend, 5, 3), 64)
	f.Add(entry(kindNotify, notifyLen, 0), 64)
	f.Add(entry(kindPad, 16, 0), 64)
	f.Add(entry(kindSend, 100, 0), 64)
	f.Add(entry(9, 0, 0), 64)
	f.Add([]byte{1, 2, 3}, 64)
	f.Fuzz(func(t *testing.T, b []byte, maxMsg int) {
		if maxMsg < 0 {
			maxMsg = -maxMsg
		}
		kind, payload, err := decodeEntry(b, maxMsg)
		if err != nil {
			if !errors.Is(err, errRing) {
				t.Fatalf("error %v does not match errRing", err)
			}
			return
		}
		n := int(binary.LittleEndian.Uint32(b))
		if len(payload) != n || entryHeader+n > len(b) {
			t.Fatalf("payload of %d bytes from a header of %d in %d bytes", len(payload), n, len(b))
		}
		switch kind {
		case kindSend:
			if n > maxMsg {
				t.Fatalf("message of %d bytes accepted, max %d", n, maxMsg)
			}
		case kindNotify:
			if n != notifyLen {
				t.Fatalf("notification of %d bytes accepted", n)
			}
		case kindPad:
		default:
			t.Fatalf("kind %d accepted", kind)
		}
	})
}

// The ring's own checks: a tail or head out of range, a padding entry
// that does not end the ring.
func TestRingChecks(t *testing.T) {
	// A reader that keeps up reads each entry as it is published.
	r := newRing(make([]byte, ringHeader+minRingData))
	var tail, rhead uint64
	for i := range 100 {
		room, at, ok, err := r.reserve(tail, 1000)
		if err != nil || !ok {
			t.Fatalf("entry %d: reserve: %v %v", i, ok, err)
		}
		room[0] = byte(i)
		tail = r.commit(tail, at, kindSend, 1000)
		for {
			kind, payload, size, err := r.next(rhead, 1<<20)
			if err != nil || size == 0 {
				t.Fatalf("entry %d: not read back: %v", i, err)
			}
			rhead += size
			if kind == kindSend {
				if len(payload) != 1000 || payload[0] != byte(i) {
					t.Fatalf("entry %d read back as %d bytes starting %d", i, len(payload), payload[0])
				}
				break
			}
		}
		r.consume(rhead)
	}
	// Entries wrapped past the end: read them back from a fresh head.
	r2 := newRing(make([]byte, ringHeader+minRingData))
	tail = 0
	var head uint64
	for i := range 200 {
		room, at, ok, err := r2.reserve(tail, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if !ok { // full: drain one
			for {
				kind, _, size, err := r2.next(head, 1<<20)
				if err != nil || size == 0 {
					t.Fatalf("full ring, nothing to read: %v", err)
				}
				head += size
				r2.consume(head)
				if kind == kindSend {
					break
				}
			}
			room, at, ok, err = r2.reserve(tail, 1000)
			if err != nil || !ok {
				t.Fatalf("entry %d: still no room after a read", i)
			}
		}
		room[0] = byte(i)
		tail = r2.commit(tail, at, kindSend, 1000)
	}
	want := -1
	for {
		kind, payload, size, err := r2.next(head, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			break
		}
		head += size
		if kind != kindSend {
			continue
		}
		if want >= 0 && payload[0] != byte(want) {
			t.Fatalf("entry %d read where %d was due", payload[0], want)
		}
		want = int(payload[0]) + 1
	}
	if want != 200 {
		t.Fatalf("last entry read %d, want 199", want-1)
	}
	// A tail out of range.
	binary.LittleEndian.PutUint64(r2.mem[offTail:], head+r2.size()+8)
	if _, _, _, err := r2.next(head, 1<<20); !errors.Is(err, errRing) {
		t.Fatalf("tail past the ring: %v", err)
	}
	// A head the reader never reached, seen by the writer.
	binary.LittleEndian.PutUint64(r2.mem[offHead:], tail+8)
	if _, _, _, err := r2.reserve(tail, 8); !errors.Is(err, errRing) {
		t.Fatalf("head past the tail: %v", err)
	}
	// Padding that stops short of the end.
	r3 := newRing(make([]byte, ringHeader+minRingData))
	putEntryHeader(r3.data, kindPad, 8)
	binary.LittleEndian.PutUint64(r3.mem[offTail:], 16)
	if _, _, _, err := r3.next(0, 1<<20); !errors.Is(err, errRing) {
		t.Fatalf("short padding: %v", err)
	}
}

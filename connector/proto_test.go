package connector

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/xferio/xfer"
)

// TestControlRoundTrip encodes every control message and decodes it back.
func TestControlRoundTrip(t *testing.T) {
	dest := xfer.RemoteAddr{Region: 3, Addr: 0x7f0000001000, Key: 0xdeadbeef}
	for _, tc := range []struct {
		msg  []byte
		want request
	}{
		{appendGet(nil, 7, 0, "a/b/k", xfer.RemoteAddr{}, 0), request{typ: msgGet, id: 7, key: "a/b/k"}},
		{appendGet(nil, 8, flagNoWait|flagDest, "a/b/k", dest, 4096), request{typ: msgGet, id: 8, flags: flagNoWait | flagDest, key: "a/b/k", dest: dest, destLen: 4096}},
		{appendGet(nil, 9, flagWantWrite, "k", xfer.RemoteAddr{}, 0), request{typ: msgGet, id: 9, flags: flagWantWrite, key: "k"}},
		{appendGet(nil, 14, flagInline|flagDest, "k", dest, 8), request{typ: msgGet, id: 14, flags: flagInline | flagDest, key: "k", dest: dest, destLen: 8}},
		{appendRelease(nil, 10, true), request{typ: msgRelease, id: 10, taken: true}},
		{appendRelease(nil, 11, false), request{typ: msgRelease, id: 11}},
		{appendCancel(nil, 12), request{typ: msgCancel, id: 12}},
		{appendSync(nil, 13), request{typ: msgSync, id: 13}},
		{appendCarried(appendGet(nil, 15, flagInline, "k", xfer.RemoteAddr{}, 0), carried(3, 4)),
			request{typ: msgGet, id: 15, flags: flagInline | flagReleases, key: "k", rels: carried(3, 4)}},
		{appendCarried(appendGet(nil, 16, flagDest, "k", dest, 8), carried(maxCarried, 1)),
			request{typ: msgGet, id: 16, flags: flagDest | flagReleases, key: "k", dest: dest, destLen: 8, rels: carried(maxCarried, 1)}},
	} {
		got, err := parseRequest(tc.msg)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseRequest(%x) = %+v, %v; want %+v", tc.msg, got, err, tc.want)
		}
	}
	m := Meta{Producer: "10.0.0.1:15500", Key: "a/b/k", Size: 24, Kind: KindTensor, DType: F32, Shape: []int64{2, 3}}
	for _, st := range []byte{statusOK, statusNeedDest, statusNotFound, statusFailed, statusRefused, statusClosed, statusSynced} {
		b, err := appendInfo(nil, 5, st, &m, dest, "why")
		if err != nil {
			t.Fatal(err)
		}
		if n := infoLen(st, &m, "why"); len(b) > n {
			t.Errorf("status %d: an answer of %d bytes, infoLen bounds it by %d", st, len(b), n)
		}
		r, err := parseReply(b)
		if err != nil || r.id != 5 || r.status != st {
			t.Fatalf("status %d: %+v, %v", st, r, err)
		}
		switch st {
		case statusOK:
			if r.src != dest || r.meta.Key != m.Key || r.meta.Size != 24 || len(r.meta.Shape) != 2 {
				t.Errorf("ok: %+v", r)
			}
		case statusNeedDest:
			if r.src != (xfer.RemoteAddr{}) || r.meta.Size != 24 {
				t.Errorf("need dest: %+v", r)
			}
		default:
			if r.msg != "why" {
				t.Errorf("status %d: message %q", st, r.msg)
			}
		}
	}
	data := []byte("twenty-four bytes of it.")
	b, err := appendValue(nil, 6, &m, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != inlineLen(&m) {
		t.Errorf("value answer of %d bytes, inlineLen says %d", len(b), inlineLen(&m))
	}
	r, err := parseReply(b)
	if err != nil || r.id != 6 || r.status != statusValue || string(r.data) != string(data) || r.meta.Key != m.Key || r.meta.Size != 24 {
		t.Errorf("value: %+v, %v", r, err)
	}
	for _, tc := range []struct {
		flags byte
		size  int64
		want  bool
	}{
		{flagInline, inlineMax, true},
		{flagInline | flagDest, 0, true},
		{flagInline, inlineMax + 1, false},
		{flagDest, 24, false},
	} {
		mm := Meta{Producer: m.Producer, Key: m.Key, Size: tc.size, Kind: KindBytes}
		if got := inlineOK(tc.flags, &mm); got != tc.want {
			t.Errorf("inlineOK(%#x, %d bytes) = %v", tc.flags, tc.size, got)
		}
	}
}

// TestControlMalformed holds the decoders to clear errors on bad input.
func TestControlMalformed(t *testing.T) {
	good := appendGet(nil, 1, flagDest, "k", xfer.RemoteAddr{Region: 1}, 8)
	for name, b := range map[string][]byte{
		"empty":         {},
		"unknown type":  {99, 1, 0, 0, 0},
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte{}, good...), 0),
		"unknown flags": {msgGet, 1, 0, 0, 0, 0x80, 1, 0, 'k'},
		"empty key":     {msgGet, 1, 0, 0, 0, 0, 0, 0},
		"bad taken":     {msgRelease, 1, 0, 0, 0, 2},
		"no releases":   {msgGet, 1, 0, 0, 0, flagReleases, 1, 0, 'k', 0},
		"too many releases": append([]byte{msgGet, 1, 0, 0, 0, flagReleases, 1, 0, 'k', maxCarried + 1},
			carried(maxCarried+1, 1)...),
		"releases short":         {msgGet, 1, 0, 0, 0, flagReleases, 1, 0, 'k', 2, 1, 0, 0, 0, 1},
		"carried taken":          {msgGet, 1, 0, 0, 0, flagReleases, 1, 0, 'k', 1, 1, 0, 0, 0, 2},
		"releases then trailing": append(appendCarried(appendGet(nil, 1, 0, "k", xfer.RemoteAddr{}, 0), carried(1, 1)), 0),
	} {
		if _, err := parseRequest(b); !errors.Is(err, errControl) {
			t.Errorf("%s: parseRequest: %v, want errControl", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"request":        good,
		"unknown status": {msgInfo, 1, 0, 0, 0, 77},
		"bad meta":       {msgInfo, 1, 0, 0, 0, statusOK, 3, 0, 9, 9, 9},
		"short message":  {msgInfo, 1, 0, 0, 0, statusFailed, 5, 0, 'x'},
		"value too long": valueMsg(5, 6),
		"value short":    valueMsg(5, 4),
		"value missing":  valueMsg(5, 5)[:len(valueMsg(5, 5))-1],
	} {
		if _, err := parseReply(b); !errors.Is(err, errControl) {
			t.Errorf("%s: parseReply: %v, want errControl", name, err)
		}
	}
}

// carried is n releases for a get to carry: ids from first on, taken
// when odd.
func carried(n int, first uint32) []byte {
	var b []byte
	for i := range uint32(n) {
		b = appendCarriedRelease(b, first+i, (first+i)%2 == 1)
	}
	return b
}

func TestCarriedReleases(t *testing.T) {
	r, err := parseRequest(appendCarried(appendGet(nil, 1, 0, "k", xfer.RemoteAddr{}, 0), carried(3, 7)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	r.eachRelease(func(id uint32, taken bool) { got = append(got, fmt.Sprint(id, taken)) })
	if want := []string{"7 true", "8 false", "9 true"}; !reflect.DeepEqual(got, want) {
		t.Errorf("eachRelease: %v, want %v", got, want)
	}
}

// valueMsg is a value answer whose metadata says size bytes, carrying n.
func valueMsg(size, n int) []byte {
	m := Meta{Producer: "h:1", Key: "a/b/k", Size: int64(size), Kind: KindBytes}
	b, _ := appendInfo(nil, 1, statusValue, &m, xfer.RemoteAddr{}, "")
	b = append(b, byte(n), 0, 0, 0)
	return append(b, make([]byte, n)...)
}

// FuzzControl feeds both decoders arbitrary bytes: they must return
// a value or an errControl, never panic, and what they accept must encode
// back to the same bytes.
func FuzzControl(f *testing.F) {
	dest := xfer.RemoteAddr{Region: 2, Addr: 4096, Key: 9}
	f.Add(appendGet(nil, 1, flagDest|flagNoWait, "a/b/k", dest, 64))
	f.Add(appendRelease(nil, 2, true))
	f.Add(appendCancel(nil, 3))
	f.Add(appendSync(nil, 5))
	m := Meta{Producer: "h:1", Key: "a/b/k", Size: 4, Kind: KindTensor, DType: I32, Shape: []int64{1}}
	for _, st := range []byte{statusOK, statusNeedDest, statusFailed} {
		b, _ := appendInfo(nil, 4, st, &m, dest, "no")
		f.Add(b)
	}
	f.Add(appendGet(nil, 6, flagInline|flagWantWrite, "a/b/k", xfer.RemoteAddr{}, 0))
	v, _ := appendValue(nil, 7, &m, []byte{1, 2, 3, 4})
	f.Add(v)
	f.Add(appendCarried(appendGet(nil, 8, flagDest, "a/b/k", dest, 64), carried(2, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := parseRequest(b); err != nil {
			if !errors.Is(err, errControl) {
				t.Fatalf("parseRequest: %v does not match errControl", err)
			}
		} else {
			var again []byte
			switch r.typ {
			case msgGet:
				again = appendGet(nil, r.id, r.flags&^flagReleases, r.key, r.dest, r.destLen)
				if r.flags&flagReleases != 0 {
					again = appendCarried(again, r.rels)
				}
			case msgRelease:
				again = appendRelease(nil, r.id, r.taken)
			case msgCancel:
				again = appendCancel(nil, r.id)
			case msgSync:
				again = appendSync(nil, r.id)
			}
			if string(again) != string(b) {
				t.Fatalf("request %x decoded to %+v, which encodes to %x", b, r, again)
			}
		}
		if r, err := parseReply(b); err != nil {
			if !errors.Is(err, errControl) {
				t.Fatalf("parseReply: %v does not match errControl", err)
			}
		} else if r.status == statusValue {
			again, err := appendValue(nil, r.id, &r.meta, r.data)
			if err != nil || string(again) != string(b) {
				t.Fatalf("value answer %x decoded to %+v, which encodes to %x, %v", b, r, again, err)
			}
		} else if _, err := appendInfo(nil, r.id, r.status, &r.meta, r.src, r.msg); err != nil {
			t.Fatalf("reply %+v decoded from %x does not encode: %v", r, b, err)
		}
	})
}

package wire

import (
	"bytes"
	"reflect"
	"testing"
)

// Each fuzz target checks that the decoder never panics, and that whatever it
// accepts encodes back to something it accepts again, equal to itself.

func FuzzReadMessage(f *testing.F) {
	f.Add(AppendHello(nil, sampleHello()))
	f.Add(AppendWelcome(nil, sampleWelcome()))
	f.Add(AppendChallenge(nil, &Challenge{Version: VersionMax, Caps: 7, AuthRequired: true}))
	f.Add(AppendAuth(nil, &Auth{}))
	f.Add(AppendResult(nil, &Result{Status: 1, Message: "x"}))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(AppendVerbsInfo(nil, &VerbsInfo{Device: "rxe0", Port: 1, LinkLayer: LinkEthernet, MTU: 1024,
		Keys: []RegionKey{{ID: 3, Access: 3, Len: 1 << 20, Key: 42, RKey: 0x1234}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, body, err := ReadMessage(bytes.NewReader(b))
		if err != nil {
			return
		}
		switch typ {
		case MsgHello:
			if m, err := DecodeHello(body); err == nil {
				again, err := DecodeHello(AppendHello(nil, m)[HandshakeHeaderLen:])
				if err != nil || again.Listen != m.Listen || len(again.Transports) != len(m.Transports) {
					t.Fatalf("hello does not round-trip: %v", err)
				}
			}
		case MsgChallenge:
			if m, err := DecodeChallenge(body); err == nil {
				if again, err := DecodeChallenge(AppendChallenge(nil, m)[HandshakeHeaderLen:]); err != nil || *again != *m {
					t.Fatalf("challenge does not round-trip: %v", err)
				}
			}
		case MsgAuth:
			_, _ = DecodeAuth(body)
		case MsgWelcome:
			if m, err := DecodeWelcome(body); err == nil {
				again, err := DecodeWelcome(AppendWelcome(nil, m)[HandshakeHeaderLen:])
				if err != nil || len(again.Exports) != len(m.Exports) || again.Proof != m.Proof || again.ID != m.ID || again.PID != m.PID {
					t.Fatalf("welcome does not round-trip: %v", err)
				}
			}
		case MsgResult:
			if m, err := DecodeResult(body); err == nil {
				if again, err := DecodeResult(AppendResult(nil, m)[HandshakeHeaderLen:]); err != nil || *again != *m {
					t.Fatalf("result does not round-trip: %v", err)
				}
			}
		case MsgJoin:
			_, _ = DecodeJoin(body)
		case MsgVerbs:
			if m, err := DecodeVerbsInfo(body); err == nil {
				if again, err := DecodeVerbsInfo(AppendVerbsInfo(nil, m)[HandshakeHeaderLen:]); err != nil || !reflect.DeepEqual(again, m) {
					t.Fatalf("verbs info does not round-trip: %v", err)
				}
			}
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(AppendHello(nil, sampleHello())[HandshakeHeaderLen:])
	r := sampleHello()
	r.Caps |= CapResume
	r.Resume[3] = 1
	f.Add(AppendHello(nil, r)[HandshakeHeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHello(b)
		if err != nil {
			return
		}
		g, err := DecodeHello(AppendHello(nil, h)[HandshakeHeaderLen:])
		if err != nil || !reflect.DeepEqual(g, h) {
			t.Fatalf("hello does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeWelcome(f *testing.F) {
	f.Add(AppendWelcome(nil, sampleWelcome())[HandshakeHeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = DecodeWelcome(b) })
}

func FuzzDecodeChallenge(f *testing.F) {
	f.Add(AppendChallenge(nil, &Challenge{Version: VersionMax, Caps: 7, AuthRequired: true})[HandshakeHeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeChallenge(b); err == nil {
			if again, err := DecodeChallenge(AppendChallenge(nil, m)[HandshakeHeaderLen:]); err != nil || *again != *m {
				t.Fatalf("challenge does not round-trip: %v", err)
			}
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	var b [FrameHeaderLen]byte
	(&Header{Type: FrameWrite, Len: 10, Region: 1}).Put(b[:])
	f.Add(b[:])
	(&Header{Type: FramePathDown}).Put(b[:])
	f.Add(bytes.Clone(b[:]))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h Header
		if DecodeHeader(in, &h) != nil {
			return
		}
		var out [FrameHeaderLen]byte
		h.Put(out[:])
		var g Header
		if err := DecodeHeader(out[:], &g); err != nil || g != h {
			t.Fatalf("header does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeRegionDesc(f *testing.F) {
	f.Add(AppendRegionDesc(nil, &RegionDesc{ID: 1, Access: 3, Addr: 4096, Len: 4096, Key: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeRegionDesc(b)
		if err != nil {
			return
		}
		if g, err := DecodeRegionDesc(AppendRegionDesc(nil, &d)); err != nil || g != d {
			t.Fatalf("descriptor does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeExport(f *testing.F) {
	f.Add(AppendExport(nil, &Export{Name: "default", Desc: RegionDesc{ID: 1, Access: 3, Addr: 4096, Len: 4096, Key: 1}}))
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeExport(b)
		if err != nil {
			return
		}
		enc := AppendExport(nil, &x)
		if len(enc) > MaxExportLen {
			t.Fatalf("export of %d bytes, limit %d", len(enc), MaxExportLen)
		}
		if g, err := DecodeExport(enc); err != nil || g != x {
			t.Fatalf("export does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeAttachInfo(f *testing.F) {
	var b [AttachInfoLen]byte
	(&AttachInfo{PID: 1, FD: 3, Base: 4096, Len: 4096}).Put(b[:])
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, in []byte) { _, _ = DecodeAttachInfo(in) })
}

func FuzzDecodeVerbsInfo(f *testing.F) {
	v := &VerbsInfo{Device: "rxe0", Port: 1, LinkLayer: LinkEthernet, GIDIndex: 1, MTU: 1024, QPNs: []uint32{17, 18}, PSNs: []uint32{1, 2}, RecvDepth: 128, MaxInline: 64}
	f.Add(AppendVerbsInfo(nil, v)[HandshakeHeaderLen:])
	v1 := *v
	v1.Version = 1
	f.Add(AppendVerbsInfo(nil, &v1)[HandshakeHeaderLen:])
	v.Keys = []RegionKey{{ID: 3, Access: 3, Base: 0x7f0000000000, Len: 1 << 20, Key: 42, RKey: 0x1234}, {ID: 4, Access: 1, Len: 8}}
	f.Add(AppendVerbsInfo(nil, v)[HandshakeHeaderLen:])
	v.RailGIDs = [][16]byte{{15: 9}}
	f.Add(AppendVerbsInfo(nil, v)[HandshakeHeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeVerbsInfo(b)
		if err != nil {
			return
		}
		again, err := DecodeVerbsInfo(AppendVerbsInfo(nil, v)[HandshakeHeaderLen:])
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("verbs info does not round-trip: %v\n%+v\n%+v", err, v, again)
		}
	})
}

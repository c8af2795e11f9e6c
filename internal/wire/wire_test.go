package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func sampleHello() *Hello {
	h := &Hello{MinVersion: 1, MaxVersion: 1, Caps: CapAuth | CapNotify, PID: 42, Policy: "auto",
		Conns: 2, MaxMessage: 65536, RecvDepth: 128, Listen: "127.0.0.1:7471",
		Transports: []TransportOffer{{Name: "tcp"}, {Name: "shm", Blob: []byte{1, 2, 3}}}}
	h.ID[0], h.HostID[1], h.Nonce[31] = 1, 2, 3
	return h
}

func sampleWelcome() *Welcome {
	w := &Welcome{Transport: "tcp", Blob: []byte("x"), Conns: 2, MaxMessage: 1 << 16, RecvDepth: 64, Listen: "[::1]:1",
		Exports: []Export{{Name: "default", Desc: RegionDesc{ID: 7, Access: 3, Addr: 0x7f0000000000, Len: 1 << 20, Key: 0xdeadbeef}}}}
	w.Token[5] = 9
	w.Proof[1], w.ID[2], w.HostID[3], w.PID = 1, 2, 3, 4
	return w
}

func roundTrip(t *testing.T, b []byte, want MsgType) []byte {
	t.Helper()
	typ, body, err := ReadMessage(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if typ != want {
		t.Fatalf("type %d, want %d", typ, want)
	}
	return body
}

func TestHandshakeRoundTrip(t *testing.T) {
	h := sampleHello()
	got, err := DecodeHello(roundTrip(t, AppendHello(nil, h), MsgHello))
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("hello: %v\n got %+v\nwant %+v", err, got, h)
	}
	// A hello that resumes carries the token; one without CapResume
	// does not, and a resume token cut short is refused.
	h.Caps |= CapResume
	h.Resume[0], h.Resume[15] = 7, 9
	rb := roundTrip(t, AppendHello(nil, h), MsgHello)
	got, err = DecodeHello(rb)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("hello with a resume token: %v\n got %+v\nwant %+v", err, got, h)
	}
	if _, err := DecodeHello(rb[:len(rb)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a hello whose resume token is cut short: %v, want ErrMalformed", err)
	}
	c := &Challenge{Version: 2, Caps: 3, AuthRequired: true}
	c.Nonce[3] = 4
	gc, err := DecodeChallenge(roundTrip(t, AppendChallenge(nil, c), MsgChallenge))
	if err != nil || !reflect.DeepEqual(gc, c) {
		t.Fatalf("challenge: %v %+v", err, gc)
	}
	a := &Auth{}
	a.Proof[0] = 1
	ga, err := DecodeAuth(roundTrip(t, AppendAuth(nil, a), MsgAuth))
	if err != nil || *ga != *a {
		t.Fatalf("auth: %v", err)
	}
	w := sampleWelcome()
	gw, err := DecodeWelcome(roundTrip(t, AppendWelcome(nil, w), MsgWelcome))
	if err != nil || !reflect.DeepEqual(gw, w) {
		t.Fatalf("welcome: %v\n got %+v\nwant %+v", err, gw, w)
	}
	r := &Result{Status: StatusAuthFailed, Message: "nope"}
	gr, err := DecodeResult(roundTrip(t, AppendResult(nil, r), MsgResult))
	if err != nil || *gr != *r {
		t.Fatalf("result: %v", err)
	}
	j := &Join{Index: 3}
	j.Token[0] = 1
	gj, err := DecodeJoin(roundTrip(t, AppendJoin(nil, j), MsgJoin))
	if err != nil || *gj != *j {
		t.Fatalf("join: %v", err)
	}
}

func TestHandshakeRejects(t *testing.T) {
	b := AppendHello(nil, sampleHello())
	for i := 0; i < len(b)-HandshakeHeaderLen; i++ {
		if _, err := DecodeHello(b[HandshakeHeaderLen : HandshakeHeaderLen+i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated hello at %d: %v", i, err)
		}
	}
	if _, err := DecodeHello(append(b[HandshakeHeaderLen:], 0)); !errors.Is(err, ErrMalformed) {
		t.Fatal("trailing byte accepted")
	}
	bad := append([]byte(nil), b...)
	copy(bad, "HTTP")
	if _, _, err := ReadMessage(bytes.NewReader(bad)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad magic: %v", err)
	}
	huge := append([]byte(nil), b[:HandshakeHeaderLen]...)
	huge[8], huge[9], huge[10], huge[11] = 0xff, 0xff, 0xff, 0x7f
	if _, _, err := ReadMessage(bytes.NewReader(huge)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("oversized body: %v", err)
	}
}

func TestFrameHeader(t *testing.T) {
	h := Header{Type: FrameWrite, Flags: FlagImm, Imm: 7, ID: 1 << 40, Region: 3, Key: 99, Addr: 0x1000, Len: 4096}
	var b [FrameHeaderLen]byte
	h.Put(b[:])
	var g Header
	if err := DecodeHeader(b[:], &g); err != nil || g != h {
		t.Fatalf("%v %+v", err, g)
	}
	for _, bad := range []Header{
		{Type: 0}, {Type: frameMax}, {Type: FrameRead, Flags: 0x80}, {Type: FrameRead, Flags: FlagImm},
		{Type: FrameWrite, Len: MaxFramePayload + 1}, {Type: FrameResp, Status: StatusWrongKey, Len: MaxErrorText + 1},
		{Type: FrameAttach, Access: 0}, {Type: FrameResp, Status: statusMax},
		{Type: FrameExport, Len: 0}, {Type: FrameExport, Len: MaxExportLen + 1},
	} {
		bad.Put(b[:])
		if err := DecodeHeader(b[:], &g); !errors.Is(err, ErrMalformed) {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := DecodeHeader(b[:10], &g); !errors.Is(err, ErrMalformed) {
		t.Error("short header accepted")
	}
}

func TestExport(t *testing.T) {
	x := Export{Name: "default", Desc: RegionDesc{ID: 7, Access: 3, Addr: 1 << 20, Len: 4096, Key: 42}}
	b := AppendExport(nil, &x)
	if g, err := DecodeExport(b); err != nil || g != x {
		t.Fatalf("%v %+v", err, g)
	}
	long := Export{Name: string(bytes.Repeat([]byte{'n'}, MaxNameLen)), Desc: x.Desc}
	if b := AppendExport(nil, &long); len(b) != MaxExportLen {
		t.Fatalf("longest export is %d bytes, MaxExportLen %d", len(b), MaxExportLen)
	}
	for name, bad := range map[string][]byte{
		"empty":      nil,
		"no name":    AppendExport(nil, &Export{Desc: x.Desc}),
		"truncated":  b[:len(b)-1],
		"trailing":   append(bytes.Clone(b), 0),
		"long name":  AppendExport(nil, &Export{Name: long.Name + "n", Desc: x.Desc}),
		"bad rights": AppendExport(nil, &Export{Name: "x", Desc: RegionDesc{ID: 1, Access: 0xf0, Len: 1}}),
	} {
		if _, err := DecodeExport(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestRegionDesc(t *testing.T) {
	d := RegionDesc{ID: 1, Access: 1, Addr: 1 << 30, Len: 4096, Key: 5}
	d.Owner[15] = 1
	b := AppendRegionDesc(nil, &d)
	if len(b) != RegionDescLen {
		t.Fatalf("len %d", len(b))
	}
	g, err := DecodeRegionDesc(b)
	if err != nil || g != d {
		t.Fatal(err)
	}
	wrap := d
	wrap.Addr, wrap.Len = ^uint64(0)-10, 100
	if _, err := DecodeRegionDesc(AppendRegionDesc(nil, &wrap)); !errors.Is(err, ErrMalformed) {
		t.Fatal("wrapping range accepted")
	}
	gpu := d
	gpu.Kind, gpu.Device = 1, 2
	if g, err := DecodeRegionDesc(AppendRegionDesc(nil, &gpu)); err != nil || g != gpu {
		t.Fatalf("GPU descriptor: %+v, %v", g, err)
	}
	for _, bad := range []RegionDesc{{ID: 1, Access: 1, Kind: 2}, {ID: 1, Access: 1, Device: 1}} {
		if _, err := DecodeRegionDesc(AppendRegionDesc(nil, &bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("descriptor of kind %d device %d accepted", bad.Kind, bad.Device)
		}
	}
	none := d
	none.Access = 0
	if _, err := DecodeRegionDesc(AppendRegionDesc(nil, &none)); !errors.Is(err, ErrMalformed) {
		t.Fatal("no-access descriptor accepted")
	}
}

func TestAttachInfo(t *testing.T) {
	a := AttachInfo{PID: 1, FD: -1, Base: 4096, Len: 8192, Key: 3}
	var b [AttachInfoLen]byte
	a.Put(b[:])
	g, err := DecodeAttachInfo(b[:])
	if err != nil || g != a {
		t.Fatal(err)
	}
	if _, err := DecodeAttachInfo(b[:5]); err == nil {
		t.Fatal("short attach info accepted")
	}
	// A GPU region: its kind, device, IPC handle and offset travel.
	gpu := AttachInfo{PID: 7, FD: -1, Base: 1 << 40, Len: 1 << 20, Key: 9, Kind: 1, Device: 3, IPCOffset: 4096}
	gpu.IPC[0], gpu.IPC[63] = 0xab, 0xcd
	gpu.Put(b[:])
	if g, err := DecodeAttachInfo(b[:]); err != nil || g != gpu {
		t.Fatalf("GPU attach info: %+v, %v", g, err)
	}
	for name, bad := range map[string]AttachInfo{
		"unknown kind":         {FD: -1, Len: 1, Kind: 2},
		"IPC handle for host":  {FD: -1, Len: 1, IPC: gpu.IPC},
		"device for host":      {FD: -1, Len: 1, Device: 1},
		"IPC offset for host":  {FD: -1, Len: 1, IPCOffset: 8},
		"memfd for GPU memory": {FD: 3, Len: 1, Kind: 1},
	} {
		bad.Put(b[:])
		if _, err := DecodeAttachInfo(b[:]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	gpu.Put(b[:])
	b[38] = 1
	if _, err := DecodeAttachInfo(b[:]); !errors.Is(err, ErrMalformed) {
		t.Error("reserved bytes set: accepted")
	}
}

func TestVerbsInfo(t *testing.T) {
	v := &VerbsInfo{Device: "rxe0", Port: 1, LinkLayer: LinkEthernet, GIDIndex: 1, MTU: 1024, LID: 0, QPNs: []uint32{17, 18}, PSNs: []uint32{1, 2}, RecvDepth: 128, MaxInline: 64, CM: true, CMPort: 4791, Version: VerbsInfoVersion}
	v.IP[15] = 9
	v.GID[15] = 1
	got, err := DecodeVerbsInfo(roundTrip(t, AppendVerbsInfo(nil, v), MsgVerbs))
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Fatalf("%v %+v", err, got)
	}
	// Version 2 carries the exported regions' rkeys; version 1 has none
	// and is still accepted.
	v.Version = VerbsInfoVersion
	v.Keys = []RegionKey{{ID: 3, Access: 3, Base: 0x7f0000000000, Len: 1 << 20, Key: 42, RKey: 0x1234}, {ID: 9, Access: 1, Base: 4096, Len: 8, Key: 7, RKey: 5}}
	if got, err := DecodeVerbsInfo(roundTrip(t, AppendVerbsInfo(nil, v), MsgVerbs)); err != nil || !reflect.DeepEqual(got, v) {
		t.Fatalf("with keys: %v %+v", err, got)
	}
	// Version 3 carries the sender's rail count; version 0 encodes 3 only
	// when there are several, so that one device's blob stays version 2.
	railed := *v
	railed.Version, railed.RailGIDs = 0, [][16]byte{{15: 2}}
	if got, err := DecodeVerbsInfo(AppendVerbsInfo(nil, &railed)[HandshakeHeaderLen:]); err != nil || got.Version != 3 || !reflect.DeepEqual(got.RailGIDs, railed.RailGIDs) {
		t.Fatalf("rails: %v %+v", err, got)
	}
	railed.RailGIDs = nil
	if got, err := DecodeVerbsInfo(AppendVerbsInfo(nil, &railed)[HandshakeHeaderLen:]); err != nil || got.Version != 2 || got.RailGIDs != nil {
		t.Fatalf("one rail: %v %+v", err, got)
	}
	many := AppendVerbsInfo(nil, &railed)[HandshakeHeaderLen:]
	many[0] = 3
	many = append(many, MaxRails) // one rail too many
	for range MaxRails {
		many = append(many, make([]byte, 16)...)
	}
	if _, err := DecodeVerbsInfo(many); !errors.Is(err, ErrMalformed) {
		t.Fatalf("%d rails accepted", MaxRails+1)
	}
	old := *v
	old.Version = 1
	got, err = DecodeVerbsInfo(AppendVerbsInfo(nil, &old)[HandshakeHeaderLen:])
	if err != nil || got.Version != 1 || got.Keys != nil || got.CMPort != v.CMPort {
		t.Fatalf("version 1: %v %+v", err, got)
	}
	for _, k := range []RegionKey{{ID: 1, Access: 0}, {ID: 1, Access: 4}, {ID: 1, Access: 1, Base: 1 << 63, Len: 1 << 63}} {
		bad := *v
		bad.Keys = []RegionKey{k}
		if _, err := DecodeVerbsInfo(AppendVerbsInfo(nil, &bad)[HandshakeHeaderLen:]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("key %+v accepted", k)
		}
	}
	b := AppendVerbsInfo(nil, v)[HandshakeHeaderLen:]
	b[0] = VerbsInfoVersion + 1
	if _, err := DecodeVerbsInfo(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("version %d accepted", VerbsInfoVersion+1)
	}
	b = AppendVerbsInfo(nil, v)[HandshakeHeaderLen:]
	if _, err := DecodeVerbsInfo(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatal("truncated key accepted")
	}
	bad := *v
	bad.MTU = 1500
	if _, err := DecodeVerbsInfo(AppendVerbsInfo(nil, &bad)[HandshakeHeaderLen:]); !errors.Is(err, ErrMalformed) {
		t.Fatal("MTU 1500 accepted")
	}
	bad = *v
	bad.Port = 0
	if _, err := DecodeVerbsInfo(AppendVerbsInfo(nil, &bad)[HandshakeHeaderLen:]); !errors.Is(err, ErrMalformed) {
		t.Fatal("port 0 accepted")
	}
}

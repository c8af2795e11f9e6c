package xfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/handshake"
	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport/tcp"
)

// These tests talk to a real target engine over real TCP with hand-made
// frames: what a buggy or hostile peer could send. Every case checks that
// the sender gets a clear answer (or the connection is closed for frames
// that break the protocol), that target memory is unchanged byte for byte,
// and that the target keeps serving a well-behaved peer.

type target struct {
	e      *Engine
	region *Region // exported as "target", read-write
	ro     *Region // exported as "ro", read-only
	snap   []byte
	roSnap []byte
}

func newTarget(t *testing.T, secret string) *target {
	t.Helper()
	e, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", Transport: PolicyTCP, MemoryMB: 8, Secret: secret, TCP: tcp.Config{Conns: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	r, err := e.NewRegion(1<<20, AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := e.NewRegion(1<<20, AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	rand.Read(r.Bytes())
	rand.Read(ro.Bytes())
	e.Export("target", r)
	e.Export("ro", ro)
	return &target{e: e, region: r, ro: ro, snap: bytes.Clone(r.Bytes()), roSnap: bytes.Clone(ro.Bytes())}
}

// check verifies that target memory is unchanged and that a proper peer is
// still served.
func (tg *target) check(t *testing.T, what string) {
	t.Helper()
	if !bytes.Equal(tg.snap, tg.region.Bytes()) || !bytes.Equal(tg.roSnap, tg.ro.Bytes()) {
		t.Fatalf("%s: target memory changed", what)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Open(ctx, Config{Transport: PolicyTCP, MemoryMB: 2, Secret: tg.e.cfg.Secret})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.Dial(ctx, tg.e.Addr())
	if err != nil {
		t.Fatalf("%s: target no longer accepts peers: %v", what, err)
	}
	b, _ := c.Alloc(4096)
	if err := p.Read(ctx, b.Bytes(), tg.region.Desc().At(0)); err != nil || !bytes.Equal(b.Bytes(), tg.snap[:4096]) {
		t.Fatalf("%s: target no longer serves reads: %v", what, err)
	}
}

// rawConn performs the dialer's side of the handshake by hand and returns
// the connection, ready for frames.
func rawConn(t *testing.T, addr, secret string) (net.Conn, *wire.Welcome) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	h := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, PID: uint32(os.Getpid()), Policy: "tcp", Conns: 1, MaxMessage: 4096, RecvDepth: 4,
		Transports: []wire.TransportOffer{{Name: "tcp"}}}
	rand.Read(h.ID[:])
	rand.Read(h.Nonce[:])
	hm := wire.AppendHello(nil, &h)
	if _, err := nc.Write(hm); err != nil {
		t.Fatal(err)
	}
	typ, body, err := wire.ReadMessage(nc)
	if err != nil || typ != wire.MsgChallenge {
		t.Fatalf("challenge: %v %v", typ, err)
	}
	if _, err := wire.DecodeChallenge(body); err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		a := wire.Auth{Proof: handshake.DialerProof(secret, hm[wire.HandshakeHeaderLen:], body)}
		nc.Write(wire.AppendAuth(nil, &a))
	}
	typ, body, err = wire.ReadMessage(nc)
	if err != nil || typ != wire.MsgWelcome {
		t.Fatalf("welcome: %v %v", typ, err)
	}
	w, err := wire.DecodeWelcome(body)
	if err != nil {
		t.Fatal(err)
	}
	return nc, w
}

func export(w *wire.Welcome, name string) wire.RegionDesc {
	for _, x := range w.Exports {
		if x.Name == name {
			return x.Desc
		}
	}
	return wire.RegionDesc{}
}

func sendFrame(t *testing.T, nc net.Conn, h wire.Header, payload []byte) {
	t.Helper()
	var b [wire.FrameHeaderLen]byte
	h.Put(b[:])
	if _, err := nc.Write(append(b[:], payload...)); err != nil {
		t.Fatalf("send frame: %v", err)
	}
}

// readResp reads the target's answer to request id.
func readResp(t *testing.T, nc net.Conn, id uint64) (wire.Header, []byte) {
	t.Helper()
	var b [wire.FrameHeaderLen]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		t.Fatalf("no response: %v", err)
	}
	var h wire.Header
	if err := wire.DecodeHeader(b[:], &h); err != nil {
		t.Fatal(err)
	}
	if h.Type != wire.FrameResp || h.ID != id {
		t.Fatalf("unexpected frame %+v", h)
	}
	body := make([]byte, h.Len)
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return h, body
}

// expectClosed checks that the target closed the connection.
func expectClosed(t *testing.T, nc net.Conn, what string) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := nc.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%s: target kept the connection open", what)
		}
		return
	}
}

func TestBadFramesRefused(t *testing.T) {
	tg := newTarget(t, "")
	nc, w := rawConn(t, tg.e.Addr(), "")
	d := export(w, "target")
	ro := export(w, "ro")
	payload := bytes.Repeat([]byte{0xee}, 4096)
	cases := []struct {
		name string
		h    wire.Header
		want wire.Status
	}{
		{"wrong key write", wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key + 1, Addr: d.Addr, Len: 4096}, wire.StatusWrongKey},
		{"wrong key read", wire.Header{Type: wire.FrameRead, Region: d.ID, Key: d.Key ^ 0xff, Addr: d.Addr, Len: 4096}, wire.StatusWrongKey},
		{"unknown region", wire.Header{Type: wire.FrameWrite, Region: 999, Key: d.Key, Addr: d.Addr, Len: 4096}, wire.StatusUnknownRegion},
		{"past the end", wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key, Addr: d.Addr + d.Len - 10, Len: 4096}, wire.StatusOutOfRange},
		{"before the start", wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key, Addr: d.Addr - 4096, Len: 4096}, wire.StatusOutOfRange},
		{"wrapping address", wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key, Addr: ^uint64(0) - 100, Len: 4096}, wire.StatusOutOfRange},
		{"read past the end", wire.Header{Type: wire.FrameRead, Region: d.ID, Key: d.Key, Addr: d.Addr + d.Len, Len: 1}, wire.StatusOutOfRange},
		{"write to read-only", wire.Header{Type: wire.FrameWrite, Region: ro.ID, Key: ro.Key, Addr: ro.Addr, Len: 4096}, wire.StatusNoAccess},
		{"notify write wrong key", wire.Header{Type: wire.FrameWrite, Flags: wire.FlagImm, Imm: 7, Region: d.ID, Key: 0, Addr: d.Addr, Len: 4096}, wire.StatusWrongKey},
		{"attach wrong key", wire.Header{Type: wire.FrameAttach, Access: 1, Region: d.ID, Key: 1}, wire.StatusWrongKey},
	}
	for i, tc := range cases {
		tc.h.ID = uint64(100 + i)
		var p []byte
		if tc.h.Type == wire.FrameWrite {
			p = payload
		}
		sendFrame(t, nc, tc.h, p)
		h, text := readResp(t, nc, tc.h.ID)
		if h.Status != tc.want {
			t.Fatalf("%s: status %v (%s), want %v", tc.name, h.Status, text, tc.want)
		}
		if len(text) == 0 {
			t.Fatalf("%s: refusal without an explanation", tc.name)
		}
		tg.check(t, tc.name)
	}
	// The same connection still works for a proper request.
	sendFrame(t, nc, wire.Header{Type: wire.FrameRead, ID: 1, Region: d.ID, Key: d.Key, Addr: d.Addr, Len: 16}, nil)
	if h, data := readResp(t, nc, 1); h.Status != wire.StatusOK || !bytes.Equal(data, tg.snap[:16]) {
		t.Fatalf("connection unusable after refusals: %+v", h)
	}
	select {
	case n := <-noteChan(tg.e):
		t.Fatalf("a refused write-with-notify produced a notification: %+v", n)
	default:
	}
}

func noteChan(e *Engine) <-chan Notification {
	ch := make(chan Notification, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if n, err := e.WaitNotify(ctx); err == nil {
		ch <- n
	}
	return ch
}

func TestMalformedFramesCloseConnection(t *testing.T) {
	tg := newTarget(t, "")
	d := export(func() *wire.Welcome { _, w := rawConn(t, tg.e.Addr(), ""); return w }(), "target")
	raw := func(b []byte) []byte { return b }
	hdr := func(h wire.Header) []byte {
		var b [wire.FrameHeaderLen]byte
		h.Put(b[:])
		return b[:]
	}
	badType := hdr(wire.Header{Type: wire.FrameRead, Region: d.ID, Key: d.Key, Addr: d.Addr, Len: 8})
	badType[0] = 0x77
	reserved := hdr(wire.Header{Type: wire.FrameRead, Region: d.ID, Key: d.Key, Addr: d.Addr, Len: 8})
	reserved[21] = 1
	cases := map[string][]byte{
		"unknown frame type":        badType,
		"reserved bytes":            reserved,
		"oversized write":           hdr(wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key, Addr: d.Addr, Len: wire.MaxFramePayload + 1}),
		"oversized send":            append(hdr(wire.Header{Type: wire.FrameSend, Len: 1 << 20}), make([]byte, 100)...),
		"refused huge write":        append(hdr(wire.Header{Type: wire.FrameWrite, Region: d.ID, Key: d.Key + 1, Addr: d.Addr, Len: 512 << 20}), make([]byte, 1000)...),
		"credits never given":       hdr(wire.Header{Type: wire.FrameCredit, Len: 1 << 20}),
		"truncated header":          raw([]byte{1, 0, 0}),
		"response to nothing":       append(hdr(wire.Header{Type: wire.FrameResp, ID: 12345, Len: 8}), make([]byte, 8)...),
		"imm flag on read":          hdr(wire.Header{Type: wire.FrameRead, Flags: wire.FlagImm, Region: d.ID, Key: d.Key, Addr: d.Addr, Len: 8}),
		"path-down on tcp":          hdr(wire.Header{Type: wire.FramePathDown}),
		"path-down with a payload":  append(hdr(wire.Header{Type: wire.FramePathDown, Len: 8}), make([]byte, 8)...),
		"sends beyond credits (x5)": bytes.Repeat(append(hdr(wire.Header{Type: wire.FrameSend, Flags: wire.FlagNoAck, Len: 8}), make([]byte, 8)...), 5),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			nc, _ := rawConn(t, tg.e.Addr(), "")
			if _, err := nc.Write(b); err != nil {
				t.Fatal(err)
			}
			if name == "truncated header" || name == "response to nothing" {
				// Not a protocol break by itself: the target waits (the rest of
				// the header) or drops it (a response to a cancelled request).
				nc.Close()
			} else {
				expectClosed(t, nc, name)
			}
			tg.check(t, name)
		})
	}
}

func TestUnauthenticatedPeerGetsNothing(t *testing.T) {
	tg := newTarget(t, "letmein-letmein-letmein")
	nc, err := net.Dial("tcp", tg.e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	h := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, Policy: "tcp", Conns: 1, MaxMessage: 4096, RecvDepth: 4, Transports: []wire.TransportOffer{{Name: "tcp"}}}
	nc.Write(wire.AppendHello(nil, &h))
	typ, body, err := wire.ReadMessage(nc)
	if err != nil || typ != wire.MsgChallenge {
		t.Fatal(typ, err)
	}
	ch, _ := wire.DecodeChallenge(body)
	if !ch.AuthRequired {
		t.Fatal("challenge does not require auth")
	}
	// Skip the proof and go straight for the memory.
	var b [wire.FrameHeaderLen]byte
	(&wire.Header{Type: wire.FrameWrite, ID: 1, Region: tg.region.h.ID(), Key: tg.region.h.Key(), Addr: tg.region.h.Base(), Len: 64}).Put(b[:])
	nc.Write(append(b[:], make([]byte, 64)...))
	typ, body, err = wire.ReadMessage(nc)
	if err == nil {
		if typ != wire.MsgResult {
			t.Fatalf("unauthenticated peer got message type %d", typ)
		}
		r, _ := wire.DecodeResult(body)
		if r.Status != wire.StatusAuthFailed {
			t.Fatalf("result %+v", r)
		}
	}
	expectClosed(t, nc, "unauthenticated")
	tg.check(t, "unauthenticated write")
	// A wrong proof is refused too, and says so.
	nc2, err := net.Dial("tcp", tg.e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	nc2.Write(wire.AppendHello(nil, &h))
	wire.ReadMessage(nc2)
	nc2.Write(wire.AppendAuth(nil, &wire.Auth{}))
	typ, body, err = wire.ReadMessage(nc2)
	if err != nil || typ != wire.MsgResult {
		t.Fatalf("wrong proof: %v %v", typ, err)
	}
	if r, _ := wire.DecodeResult(body); r.Status != wire.StatusAuthFailed || r.Message == "" {
		t.Fatalf("wrong proof result %+v", r)
	}
	tg.check(t, "wrong proof")
}

func TestGarbageToPort(t *testing.T) {
	tg := newTarget(t, "")
	r := mrand.New(mrand.NewPCG(1, 2))
	inputs := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		[]byte("XFER"),
		append([]byte("XFER\x01\x00\x00\x00"), 0xff, 0xff, 0xff, 0xff),
		wire.AppendHello(nil, &wire.Hello{MinVersion: 9, MaxVersion: 9}),
		wire.AppendJoin(nil, &wire.Join{}),
		wire.AppendAuth(nil, &wire.Auth{}),
	}
	for range 200 {
		b := make([]byte, r.IntN(512))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if r.IntN(2) == 0 && len(b) > 12 {
			copy(b, "XFER")
			b[4] = byte(1 + r.IntN(6))
			b[5], b[6], b[7] = 0, 0, 0
			b[8], b[9], b[10], b[11] = byte(len(b)-12), 0, 0, 0
		}
		inputs = append(inputs, b)
	}
	for _, in := range inputs {
		nc, err := net.Dial("tcp", tg.e.Addr())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(in)
		nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		io.Copy(io.Discard, nc)
		nc.Close()
	}
	tg.check(t, "garbage")
}

// FuzzServe feeds arbitrary frames to a live target after a real handshake:
// whatever arrives, the target must not crash, must not change memory it was
// not asked to (a refused frame), and must keep serving.
func FuzzServe(f *testing.F) {
	var b [wire.FrameHeaderLen]byte
	(&wire.Header{Type: wire.FrameRead, ID: 1, Len: 8}).Put(b[:])
	f.Add(b[:])
	(&wire.Header{Type: wire.FrameWrite, ID: 2, Len: 8, Key: 1}).Put(b[:])
	f.Add(append(b[:], 1, 2, 3, 4, 5, 6, 7, 8))
	(&wire.Header{Type: wire.FramePathDown}).Put(b[:])
	f.Add(bytes.Clone(b[:]))
	tg := (*target)(nil)
	var tt *testing.T
	f.Fuzz(func(t *testing.T, in []byte) {
		if tg == nil {
			tt = t
			tg = newTargetNoCleanup(t)
		}
		_ = tt
		nc, _ := rawConn(t, tg.e.Addr(), "")
		nc.Write(in)
		nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		io.Copy(io.Discard, nc)
		nc.Close()
		// Fuzz frames carry no valid key (keys are random), so nothing may
		// change.
		if !bytes.Equal(tg.snap, tg.region.Bytes()) {
			t.Fatal("target memory changed")
		}
	})
	if tg != nil {
		tg.e.Close()
	}
}

func newTargetNoCleanup(t *testing.T) *target {
	e, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", Transport: PolicyTCP, MemoryMB: 8, TCP: tcp.Config{Conns: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.NewRegion(1<<20, AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	rand.Read(r.Bytes())
	e.Export("target", r)
	return &target{e: e, region: r, snap: bytes.Clone(r.Bytes())}
}

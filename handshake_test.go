package xfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/wire"
)

// dialHello dials addr and sends h, as a dialer's first message, and
// returns the connection, which the caller closes, with a 10 s deadline.
// A failed write is left for the caller's read to see: the listener may
// close the connection before h arrives.
func dialHello(t *testing.T, addr string, h *wire.Hello) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write(wire.AppendHello(nil, h))
	return nc
}

// scan plays an unauthenticated dialer against addr: it says hello, then
// either closes its side (proof == nil) or sends proof, and returns every
// byte the listener sent until it closed the connection.
func scan(t *testing.T, addr string, proof *wire.Auth) []byte {
	t.Helper()
	h := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, Policy: "tcp", Conns: 1, MaxMessage: 4096, RecvDepth: 4,
		Transports: []wire.TransportOffer{{Name: "tcp"}}}
	h.ID[0], h.Nonce[0] = 1, 2 // the same hello every time
	nc := dialHello(t, addr, &h)
	defer nc.Close()
	if proof != nil {
		nc.Write(wire.AppendAuth(nil, proof))
	} else {
		nc.(*net.TCPConn).CloseWrite()
	}
	got, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("scan %s: %v", addr, err)
	}
	return got
}

// zeroNonce zeroes the challenge's nonce, the one random field, in what a
// scan received.
func zeroNonce(t *testing.T, b []byte) []byte {
	t.Helper()
	b = bytes.Clone(b)
	typ, body, err := wire.ReadMessage(bytes.NewReader(b))
	if err != nil || typ != wire.MsgChallenge {
		t.Fatalf("first message: type %d, %v; want a challenge", typ, err)
	}
	ch, err := wire.DecodeChallenge(body)
	if err != nil || !ch.AuthRequired {
		t.Fatalf("challenge %+v, %v: want one that requires auth", ch, err)
	}
	const at = wire.HandshakeHeaderLen + 2 + 8 // version, caps
	clear(b[at : at+32])
	return b
}

// TestScanYieldsNothing plays the unauthenticated dialer against real
// listeners: what it receives is the same whatever the listener's secret
// (but for a random nonce), and holds no proof, no engine ID, host ID or
// PID, no transport blob and no export; the refusals are counted.
func TestScanYieldsNothing(t *testing.T) {
	a := newTarget(t, "the-first-secret-of-two")
	b := newTarget(t, "the-second-secret-of-two")
	for _, c := range []struct {
		name  string
		proof *wire.Auth
	}{{"no proof", nil}, {"a wrong proof", &wire.Auth{Proof: [32]byte{1}}}} {
		ga, gb := scan(t, a.e.Addr(), c.proof), scan(t, b.e.Addr(), c.proof)
		if !bytes.Equal(zeroNonce(t, ga), zeroNonce(t, gb)) {
			t.Fatalf("%s: listeners with different secrets answered differently:\n%q\n%q", c.name, ga, gb)
		}
		for _, tg := range []*target{a, b} {
			got := ga
			if tg == b {
				got = gb
			}
			pid := binary.LittleEndian.AppendUint32(nil, uint32(os.Getpid()))
			leaks := map[string][]byte{
				"secret": []byte(tg.e.cfg.Secret), "engine id": tg.e.id[:], "host id": tg.e.hostID[:], "pid": pid,
				"export key":  binary.LittleEndian.AppendUint64(nil, tg.region.h.Key()),
				"export name": []byte("target"), "listen address": []byte(tg.e.Addr()),
			}
			if blob := tg.e.transports["tcp"].LocalBlob(); len(blob) > 0 {
				leaks["tcp blob"] = blob
			}
			for what, v := range leaks {
				if bytes.Contains(got, v) {
					t.Errorf("%s: the unauthenticated dialer received the %s", c.name, what)
				}
			}
			// Nothing but a challenge and, for a wrong proof, a refusal.
			r := bytes.NewReader(got)
			n := 0
			for r.Len() > 0 {
				typ, _, err := wire.ReadMessage(r)
				if err != nil || typ != wire.MsgChallenge && typ != wire.MsgResult {
					t.Fatalf("%s: message type %d, %v", c.name, typ, err)
				}
				n++
			}
			if n > 2 {
				t.Fatalf("%s: %d messages", c.name, n)
			}
		}
	}
	for _, tg := range []*target{a, b} {
		want := map[string]bool{ReasonNoProof: false, ReasonBadProof: false}
		for _, f := range tg.e.Status().AuthFailures {
			if f.Plane == PlanePeer {
				want[f.Reason] = true
			}
		}
		if !want[ReasonNoProof] || !want[ReasonBadProof] {
			t.Errorf("refusals not counted: %+v", tg.e.Status().AuthFailures)
		}
		tg.check(t, "scanned")
	}
}

// TestShortSecretRefused: a secret under MinSecretLen bytes is refused,
// and the error says how to make one without showing it.
func TestShortSecretRefused(t *testing.T) {
	_, err := (Config{Secret: "topsecret"}).WithDefaults()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("xfer secret")) || bytes.Contains([]byte(err.Error()), []byte("topsecret")) {
		t.Fatalf("short secret: %v", err)
	}
	f := t.TempDir() + "/secret"
	s, err := GenerateSecret()
	if err != nil || len(s) < MinSecretLen {
		t.Fatalf("GenerateSecret: %q %v", s, err)
	}
	os.WriteFile(f, []byte(s+"\n"), 0o600)
	c, err := (Config{SecretFile: f}).WithDefaults()
	if err != nil || c.Secret != s {
		t.Fatalf("secret_file: %v", err)
	}
	if _, err := (Config{SecretFile: f, Secret: "another-secret-of-enough-length"}).WithDefaults(); err == nil {
		t.Fatal("secret and a different secret_file accepted")
	}
	os.WriteFile(f, []byte("short\n"), 0o600)
	if _, err := (Config{SecretFile: f}).WithDefaults(); err == nil {
		t.Fatal("short secret_file accepted")
	}
}

// TestAllowedPeers: a listener whose allowed_peers leave out the caller
// closes the connection before the handshake says anything, and counts
// it; one whose list holds the caller serves it.
func TestAllowedPeers(t *testing.T) {
	ctx := context.Background()
	closed, err := Open(ctx, Config{Listen: "127.0.0.1:0", Transport: PolicyTCP, MemoryMB: 2, Security: SecurityConfig{AllowedPeers: []string{"10.0.0.0/8", "fd00::/8"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	if got := scanOpen(t, closed.Addr()); len(got) != 0 {
		t.Fatalf("a caller outside allowed_peers received %q", got)
	}
	n := uint64(0)
	for _, f := range closed.Status().AuthFailures {
		if f.Plane == PlanePeer && f.Reason == ReasonNotAllowed {
			n = f.Count
		}
	}
	if n != 1 {
		t.Fatalf("not_allowed refusals: %+v", closed.Status().AuthFailures)
	}
	open, err := Open(ctx, Config{Listen: "127.0.0.1:0", Transport: PolicyTCP, MemoryMB: 2, Security: SecurityConfig{AllowedPeers: []string{"127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	// A caller refused at once takes it for a drop and dials again, for
	// a handshake_timeout.
	c, err := Open(ctx, Config{Transport: PolicyTCP, MemoryMB: 2, HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Dial(ctx, open.Addr()); err != nil {
		t.Fatalf("a caller in allowed_peers: %v", err)
	}
	if _, err := c.Dial(ctx, closed.Addr()); err == nil {
		t.Fatal("a caller outside allowed_peers connected")
	}
}

// scanOpen says hello to addr without a secret and returns what comes back
// before the listener closes.
func scanOpen(t *testing.T, addr string) []byte {
	t.Helper()
	h := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, Policy: "tcp", Conns: 1, MaxMessage: 4096, RecvDepth: 4}
	nc := dialHello(t, addr, &h)
	defer nc.Close()
	got, _ := io.ReadAll(nc)
	return got
}

// TestRequireAuthentication: require_authentication refuses to open an
// engine without a secret, in either of its spellings.
func TestRequireAuthentication(t *testing.T) {
	for _, s := range []SecurityConfig{{RequireAuthentication: true}, {RDMA: SecurityRDMAConfig{RequireAuthentication: true}}} {
		e, err := Open(context.Background(), Config{MemoryMB: 2, Security: s})
		if err == nil {
			e.Close()
			t.Fatalf("%+v: opened without a secret", s)
		}
		if !strings.Contains(err.Error(), "xfer secret") {
			t.Fatalf("%+v: %v", s, err)
		}
		e, err = Open(context.Background(), Config{MemoryMB: 2, Security: s, Secret: "a-secret-long-enough-to-use"})
		if err != nil {
			t.Fatal(err)
		}
		e.Close()
	}
}

// TestAllowedGIDs: the GID in a peer's rdma handshake blob is checked
// against security.rdma.allowed_gids, in any IPv6 spelling; transports
// without GIDs are not concerned.
func TestAllowedGIDs(t *testing.T) {
	e, err := Open(context.Background(), Config{MemoryMB: 2, Transport: PolicyTCP,
		Security: SecurityConfig{RDMA: SecurityRDMAConfig{AllowedGIDs: []string{"fe80:0000:0000:0000:0002:c903:0086:a100"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	blob := func(gid string) []byte {
		v := wire.VerbsInfo{Device: "mlx5_0", Port: 1, LinkLayer: wire.LinkEthernet, MTU: 1024, GID: [16]byte(net.ParseIP(gid).To16())}
		return wire.AppendVerbsInfo(nil, &v)[wire.HandshakeHeaderLen:]
	}
	if err := e.negotiate.GIDAllowed("rdma", blob("fe80::2:c903:86:a100")); err != nil {
		t.Fatalf("an allowed GID: %v", err)
	}
	if err := e.negotiate.GIDAllowed("rdma", blob("fe80::6666")); err == nil || !strings.Contains(err.Error(), "allowed_gids") {
		t.Fatalf("another GID: %v", err)
	}
	if err := e.negotiate.GIDAllowed("rdma", []byte("garbage")); err == nil {
		t.Fatal("a malformed blob passed")
	}
	// A peer over several devices (rails): every rail's GID is checked.
	railed := func(rail string) []byte {
		v := wire.VerbsInfo{Device: "mlx5_0", Port: 1, LinkLayer: wire.LinkEthernet, MTU: 1024, GID: [16]byte(net.ParseIP("fe80::2:c903:86:a100").To16()),
			RailGIDs: [][16]byte{[16]byte(net.ParseIP(rail).To16())}}
		return wire.AppendVerbsInfo(nil, &v)[wire.HandshakeHeaderLen:]
	}
	if err := e.negotiate.GIDAllowed("rdma", railed("fe80::2:c903:86:a100")); err != nil {
		t.Fatalf("rails with allowed GIDs: %v", err)
	}
	if err := e.negotiate.GIDAllowed("rdma", railed("fe80::6666")); err == nil || !strings.Contains(err.Error(), "fe80::6666") {
		t.Fatalf("a second rail's GID that is not allowed: %v", err)
	}
	if err := e.negotiate.GIDAllowed("tcp", nil); err != nil {
		t.Fatalf("tcp: %v", err)
	}
}

// A peer's join token stays valid while its connection lives (an rdma
// rail that comes back takes an extra connection then), and is forgotten
// when the connection ends: a connection that joined and was not taken is
// closed, and a later join is refused.
func TestJoinTokenLivesWithConnection(t *testing.T) {
	tg := newTarget(t, "")
	nc, w := rawConn(t, tg.e.Addr(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	extra, err := tg.e.join(ctx, tg.e.Addr(), w.Token)
	if err != nil {
		t.Fatalf("join while the connection lives: %v", err)
	}
	defer extra.Close()
	nc.Close()
	extra.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the joined connection nobody took: read %d, %v after the connection ended; want EOF", n, err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := tg.e.join(ctx, tg.e.Addr(), w.Token)
		if err != nil {
			if !strings.Contains(err.Error(), "unknown token") {
				t.Fatalf("join after the connection ended: %v; want an unknown token", err)
			}
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the token is still taken 10s after its connection ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package transferctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

const testSecret = "the-transfer-secret-of-this-test"

type refusedConn struct{ reason, err string }

// testHello is the hello the tests' producers send.
var testHello = Msg{Type: TypeHello, Transfers: 1, Bytes: 16}

// served is Serve's result.
type served struct {
	c   *Conn
	err error
}

// serve runs Serve in the background, with testHello, and returns its
// result's channel and the refusals it reported.
func serve(t *testing.T, addr string, authTimeout time.Duration, secret string) (chan served, func() []refusedConn) {
	return serveWith(t, ServeConfig{Addr: addr, Timeout: 10 * time.Second, HandshakeTimeout: authTimeout, Secret: secret})
}

// serveWith is serve with the whole configuration.
func serveWith(t *testing.T, cfg ServeConfig) (chan served, func() []refusedConn) {
	t.Helper()
	var mu sync.Mutex
	var list []refusedConn
	out := make(chan served, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	cfg.Hello = testHello
	cfg.Refused = func(_, reason string, err error) {
		mu.Lock()
		list = append(list, refusedConn{reason, err.Error()})
		mu.Unlock()
	}
	go func() {
		defer close(done)
		c, ready, err := Serve(ctx, cfg)
		if err == nil && ready.Type != TypeReady {
			t.Errorf("Serve returned %+v, not the consumer's ready", ready)
		}
		out <- served{c, err}
	}()
	return out, func() []refusedConn { mu.Lock(); defer mu.Unlock(); return append([]refusedConn(nil), list...) }
}

// servedConn waits for what serve (or serveWith) returned and returns the
// producer's connection, or fails the test with Serve's error.
func servedConn(t *testing.T, served chan served) *Conn {
	t.Helper()
	res := <-served
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.c
}

// dialRaw connects to addr once it listens.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	for range 100 {
		if nc, err := net.Dial("tcp", addr); err == nil {
			t.Cleanup(func() { nc.Close() })
			return nc
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
	return nil
}

// TestServeAuthenticatedConsumer: with a secret, the producer serves the
// consumer that proves it, not the connections that came first: one that
// stays idle (closed after the bound), one that sends a forged verdict
// at once, one with another secret. Each refusal is reported.
func TestServeAuthenticatedConsumer(t *testing.T) {
	addr := freeAddr(t)
	served, refused := serve(t, addr, 300*time.Millisecond, testSecret)
	idle := dialRaw(t, addr)
	forger := dialRaw(t, addr)
	forger.Write([]byte(`{"type":"got","seq":1,"md5_ok":true}` + "\n"))
	_, _, err := Connect(context.Background(), addr, 5*time.Second, "another-secret-of-enough-length", func(string) {})
	if err == nil || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("a consumer with another secret: %v", err)
	}
	waitRefusals(t, refused, "timeout", 1) // the idle connection is past its bound
	c, hello, err := Connect(context.Background(), addr, 5*time.Second, testSecret, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if hello.Transfers != 1 {
		t.Fatalf("hello: %+v", hello)
	}
	if err := c.Send(Msg{Type: TypeReady, Pull: "write"}); err != nil {
		t.Fatal(err)
	}
	p := servedConn(t, served)
	defer p.Close()
	// The idle connection is closed after the bound, having got a
	// challenge and nothing else.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(idle)
	line, _ := r.ReadString('\n')
	if !strings.HasPrefix(line, `{"type":"challenge","nonce":"`) {
		t.Fatalf("idle connection got %q", line)
	}
	if rest, err := r.ReadString('\n'); err == nil {
		t.Fatalf("idle connection got %q too, and was not closed", rest)
	}
	// The conversation works, and every message is authenticated.
	if err := p.Send(Msg{Type: TypePut, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(TypePut); err != nil || m.Seq != 1 {
		t.Fatalf("put: %+v %v", m, err)
	}
	// A line injected into the stream, as a man in the middle would, is
	// refused.
	c.conn.Write([]byte(`{"type":"got","seq":1}` + "\n"))
	if _, err := p.Recv(TypeGot); err == nil || !strings.Contains(err.Error(), "failed authentication") {
		t.Fatalf("an unauthenticated got: %v", err)
	}
	// The refusals are reported (the idle one's just after it closed).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		reasons := map[string]int{}
		for _, r := range refused() {
			reasons[r.reason]++
		}
		if reasons["bad_proof"] == 1 && reasons["timeout"] == 1 && reasons["no_proof"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refusals %+v, want one bad_proof, one timeout, one no_proof", refused())
		}
	}
}

// TestSecretMismatchSaysSo: a consumer with a secret against a producer
// without, and the reverse, fail saying that the secrets differ.
func TestSecretMismatchSaysSo(t *testing.T) {
	addr := freeAddr(t)
	served, _ := serve(t, addr, time.Second, "")
	errc := make(chan error, 1)
	go func() {
		c, _, err := Connect(context.Background(), addr, 5*time.Second, testSecret, func(string) {})
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "has no secret") {
		t.Fatalf("a consumer with a secret against a producer without: %v", err)
	}
	// The open producer heard why, and ended.
	if res := <-served; res.err == nil || !strings.Contains(res.err.Error(), "give both the same secret") {
		if res.c != nil {
			res.c.Close()
		}
		t.Fatalf("the open producer against a consumer with a secret: %v", res.err)
	}
	addr = freeAddr(t)
	served, _ = serve(t, addr, time.Second, testSecret)
	nc := dialRaw(t, addr)
	c := NewConn(context.Background(), nc, 5*time.Second, "producer")
	if _, err := c.Recv(TypeHello); err == nil || !strings.Contains(err.Error(), "requires a shared secret") {
		t.Fatalf("a consumer without a secret: %v", err)
	}
}

// FuzzRecvAuthenticated feeds an authenticated reader arbitrary lines: a
// line is accepted only with the MAC of its message under the key and
// counter; nothing panics.
func FuzzRecvAuthenticated(f *testing.F) {
	key := derive(testSecret, labelProducerKey, make([]byte, 32), make([]byte, 32))
	good := []byte(`{"type":"put","seq":1}`)
	f.Add(append(hex.AppendEncode(nil, lineMAC(key, 0, good)), append([]byte(" "), good...)...))
	f.Add(good)
	f.Add([]byte(strings.Repeat("0", 64) + ` {"type":"put"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go b.Write(append(line, '\n'))
		cc := NewConn(context.Background(), a, time.Second, "producer")
		cc.rkey = key
		defer cc.Close()
		_, err := cc.Recv(TypePut)
		valid := len(line) >= macLen && line[macLen-1] == ' ' &&
			string(line[:macLen-1]) == hex.EncodeToString(lineMAC(key, 0, line[macLen:]))
		if err == nil && !valid {
			t.Fatalf("a line without its MAC was accepted: %q", line)
		}
	})
}

package kv

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/xferio/xfer"
)

// kvRefusals counts the server's kv refusals for reason.
func kvRefusals(s *testServer, reason string) uint64 {
	var n uint64
	for _, f := range s.Engine().Status().AuthFailures {
		if f.Plane != xfer.PlaneKV {
			continue
		}
		if f.Reason == reason {
			n += f.Count
		}
	}
	return n
}

// TestConnAuth: a client with the secret authenticates its connection once
// and its calls carry no proof of their own, on both request paths; a
// client with another secret, or a server without one, is refused at
// once with ErrAuth and a reason that says which, and the server counts
// the refusal.
func TestConnAuth(t *testing.T) {
	ctx := ctxT(t)
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Secret: testSecret}})
	for _, mode := range modes {
		var proofs, calls int
		watch := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			calls++
			proofs += len(md.Get(mdCallProof))
			return invoker(ctx, method, req, reply, cc, opts...)
		})
		c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}, Requests: mode,
			DialOptions: []grpc.DialOption{watch}})
		if err := c.Put(ctx, "k-"+mode, []byte("value")); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if v, err := c.Get(ctx, "k-"+mode); err != nil || string(v) != "value" {
			t.Fatalf("%s: get: %q %v", mode, v, err)
		}
		if calls == 0 || proofs != 0 {
			t.Errorf("%s: %d gRPC calls carried %d proofs, want some calls and no proof", mode, calls, proofs)
		}
	}

	start := time.Now()
	_, err := Dial(ctx, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: "another-secret-of-enough-length"}})
	if !errors.Is(err, xfer.ErrAuth) || !strings.Contains(err.Error(), "different secrets") {
		t.Fatalf("a client with another secret: %v, want ErrAuth naming different secrets", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a refused client waited %v for its verdict", d)
	}
	// The server counts the refusal once it has sent it: the client may
	// have its verdict a moment before.
	waitFor(t, 5*time.Second, "the refusal counted", func() bool { return kvRefusals(s, xfer.ReasonBadProof) > 0 },
		func() string { return fmt.Sprintf("refusals %+v", s.Engine().Status().AuthFailures) })

	open := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP}})
	_, err = Dial(ctx, open.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}})
	if !errors.Is(err, xfer.ErrAuth) || !strings.Contains(err.Error(), "no shared secret") {
		t.Fatalf("a client with a secret against a server without: %v, want ErrAuth", err)
	}
	// A client without a secret still uses a server without one.
	c := dialOpts(t, open.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4}})
	if err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// TestConnAuthScan plays a dialer without the secret against a real
// server: what it receives before it proves anything is the magic, the
// server's flag and a nonce that differs every time, nothing derived from
// the secret; a wrong proof gets the refusal byte and a closed connection,
// and the refusal is counted.
func TestConnAuthScan(t *testing.T) {
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Secret: testSecret}})
	var nonces [][]byte
	for range 2 {
		conn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		hello := append([]byte(connMagic), connHasSecret)
		hello = append(hello, make([]byte, connNonceLen)...)
		if _, err := conn.Write(hello); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, connHelloLen)
		if _, err := io.ReadFull(conn, reply); err != nil {
			t.Fatal(err)
		}
		if string(reply[:4]) != connMagic || reply[4] != connHasSecret {
			t.Fatalf("reply %x", reply)
		}
		nonces = append(nonces, reply[5:])
		// The server's nonce is not a MAC of what the dialer sent.
		k := newCallKeys(testSecret)
		for _, label := range []string{connClientLabel, connServerLabel} {
			if hmac.Equal(reply[5:], k.connMAC(nil, label, hello[5:], nil, nil)) {
				t.Fatal("the server's nonce depends on the secret")
			}
		}
		conn.Write(make([]byte, 32)) // a wrong proof
		rest, _ := io.ReadAll(conn)
		if !bytes.Equal(rest, []byte{connRefused}) {
			t.Fatalf("after a wrong proof the server sent %x, want only the refusal", rest)
		}
		conn.Close()
	}
	if bytes.Equal(nonces[0], nonces[1]) {
		t.Fatal("the server's nonce repeats")
	}
	// Refusals are counted once the handshake returns; give it a moment.
	deadline := time.Now().Add(5 * time.Second)
	for kvRefusals(s, xfer.ReasonBadProof) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := kvRefusals(s, xfer.ReasonBadProof); n < 2 {
		t.Errorf("%d bad proofs counted, want 2", n)
	}
}

// FuzzConnHandshake feeds arbitrary bytes to the server's side of the
// exchange over a real TCP connection: it never panics, and it never
// authenticates a connection whose client did not prove the secret.
func FuzzConnHandshake(f *testing.F) {
	hello := append([]byte(connMagic), connHasSecret)
	hello = append(hello, make([]byte, connNonceLen)...)
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), make([]byte, 32)...))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Add([]byte(connMagic))
	f.Add([]byte{})
	creds := &connCreds{inner: insecure.NewCredentials(), keys: newCallKeys(testSecret)}
	f.Fuzz(func(t *testing.T, in []byte) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		go func() {
			c, err := net.Dial("tcp", lis.Addr().String())
			if err != nil {
				return
			}
			c.Write(in)
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c)
			c.Close()
		}()
		raw, err := lis.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		conn, ai, err := creds.ServerHandshake(raw)
		if err != nil {
			return
		}
		if ai.(connAuthInfo).authenticated {
			t.Fatalf("%x authenticated without the secret", in)
		}
		if !bytes.HasPrefix(in, []byte(connMagic)) {
			// Served as a plain connection: it must read back what the
			// server looked at.
			got, _ := io.ReadAll(conn)
			if !bytes.Equal(got, in) {
				t.Fatalf("a plain connection read %x, sent %x", got, in)
			}
		}
	})
}

// TestConnAuthRefusedText: the reason of a refused connection comes out of
// gRPC's Unavailable message.
func TestConnAuthRefusedText(t *testing.T) {
	msg := `connection error: desc = "transport: authentication handshake failed: ` + authRefusedText + `the server refused this client's proof: the two have different secrets"`
	got, ok := authRefused(msg)
	if !ok || got != "the server refused this client's proof: the two have different secrets" {
		t.Fatalf("%q %v", got, ok)
	}
	if _, ok := authRefused("connection refused"); ok {
		t.Fatal("a plain Unavailable taken for a refusal")
	}
}

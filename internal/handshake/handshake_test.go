package handshake

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/admit"
	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/wire"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (dialer, acceptor net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

// exchange runs both sides, the dialer with dialSecret and the acceptor
// with acceptSecret, and returns their errors and the dialer's welcome.
func exchange(t *testing.T, dialSecret, acceptSecret string) (dialErr, acceptErr error, w *wire.Welcome) {
	t.Helper()
	d, a := pair(t)
	gate := admit.New(admit.Config{})
	done := make(chan error, 1)
	go func() {
		in := Accept(a, gate.Admit(a), 5*time.Second, acceptSecret)
		_, h, body, err := in.First(context.Background())
		if err == nil {
			_, err = in.Challenge(context.Background(), h, body, wire.CapAuth)
		}
		if err == nil {
			err = in.Welcome(&wire.Welcome{Transport: "tcp", Conns: 1, MaxMessage: 1, RecvDepth: 1})
		}
		if err != nil {
			a.Close()
		}
		done <- err
	}()
	d.SetDeadline(time.Now().Add(5 * time.Second))
	h := wire.Hello{MinVersion: wire.VersionMin, MaxVersion: wire.VersionMax, Caps: wire.CapAuth,
		Transports: []wire.TransportOffer{{Name: "tcp"}}}
	_, w, dialErr = Dial(context.Background(), d, "peer", &h, dialSecret)
	if dialErr != nil {
		d.Close() // as the engine does: the acceptor's read ends
	}
	return dialErr, <-done, w
}

func TestHandshake(t *testing.T) {
	const secret = "0123456789abcdef0123"
	for _, s := range []string{"", secret} {
		dialErr, acceptErr, w := exchange(t, s, s)
		if dialErr != nil || acceptErr != nil || w == nil || w.Transport != "tcp" {
			t.Fatalf("secret %q: dial %v, accept %v, welcome %+v", s, dialErr, acceptErr, w)
		}
	}
}

func TestWrongSecret(t *testing.T) {
	dialErr, acceptErr, _ := exchange(t, "0123456789abcdef-one", "0123456789abcdef-two")
	if !errors.Is(dialErr, ErrAuth) {
		t.Errorf("dial: %v, want ErrAuth", dialErr)
	}
	var ae *AuthError
	if !errors.As(acceptErr, &ae) || ae.Reason != auth.ReasonBadProof {
		t.Errorf("accept: %v, want a bad proof", acceptErr)
	}
}

func TestSecretOnOneSide(t *testing.T) {
	if dialErr, _, _ := exchange(t, "", "0123456789abcdef0123"); !errors.Is(dialErr, ErrAuth) {
		t.Errorf("dialer without the acceptor's secret: %v, want ErrAuth", dialErr)
	}
	if dialErr, _, _ := exchange(t, "0123456789abcdef0123", ""); !errors.Is(dialErr, ErrAuth) {
		t.Errorf("dialer with a secret the acceptor lacks: %v, want ErrAuth", dialErr)
	}
}

func TestResultErr(t *testing.T) {
	body := wire.AppendResult(nil, &wire.Result{Status: wire.StatusNoTransport, Message: "no usable transport: tcp: off"})[wire.HandshakeHeaderLen:]
	err := resultErr("peer", body)
	if !errors.Is(err, ErrNoTransport) || err.Error() != "dial peer: refused by peer: no usable transport: tcp: off" {
		t.Errorf("resultErr: %v", err)
	}
	ok := wire.AppendResult(nil, &wire.Result{Status: wire.StatusOK})[wire.HandshakeHeaderLen:]
	if err := resultErr("peer", ok); err != nil {
		t.Errorf("OK: %v", err)
	}
}

// TestHostID: one process computes one identity (where the host has a
// boot ID: else each call is random, and two engines never share a host).
func TestHostID(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("no boot ID here")
	}
	if a, b := HostID(), HostID(); a != b || a == [16]byte{} {
		t.Fatalf("HostID: %x, then %x", a, b)
	}
}

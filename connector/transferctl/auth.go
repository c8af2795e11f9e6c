package transferctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/auth"
)

// The authentication messages' types (with a secret; see the package
// documentation).
const (
	TypeChallenge = "challenge" // producer → consumer: the producer's nonce
	TypeAuth      = "auth"      // consumer → producer: its nonce and proof; producer → consumer: its proof
)

// DefaultAuthTimeout bounds how long the producer waits for a connection
// to authenticate before it closes it (Serve).
const DefaultAuthTimeout = 10 * time.Second

const (
	labelConsumerProof = "xfer-transfer-v1 consumer proof"
	labelProducerProof = "xfer-transfer-v1 producer proof"
	labelConsumerKey   = "xfer-transfer-v1 consumer key"
	labelProducerKey   = "xfer-transfer-v1 producer key"
)

// derive is HMAC-SHA256(secret, label | nonce_p | nonce_c): a proof, or a
// direction's line key.
func derive(secret, label string, np, nc []byte) []byte {
	return auth.NewKey([]byte(secret)).Sum(nil, label, np, nc)
}

// AuthError is a connection that did not authenticate; Reason is one of
// the engine's refusal reasons (no_proof, bad_proof, malformed, timeout).
type AuthError struct {
	Reason string
	Err    error
}

func (e *AuthError) Error() string { return e.Err.Error() }
func (e *AuthError) Unwrap() error { return e.Err }

// authenticate runs the producer's (producer) or the consumer's side of
// the authentication. With an empty secret it does nothing.
func (c *Conn) authenticate(secret string, producer bool) error {
	if secret == "" {
		return nil
	}
	np, nc := make([]byte, 32), make([]byte, 32)
	if producer {
		rand.Read(np)
		if err := c.Send(Msg{Type: TypeChallenge, Nonce: hex.EncodeToString(np)}); err != nil {
			return &AuthError{"no_proof", err}
		}
		m, err := c.Recv(TypeAuth)
		if err != nil {
			reason := "no_proof"
			if errors.Is(err, os.ErrDeadlineExceeded) {
				reason = "timeout"
			}
			return &AuthError{reason, err}
		}
		got, err1 := hex.DecodeString(m.Proof)
		if n, err2 := hex.DecodeString(m.Nonce); err1 != nil || err2 != nil || len(n) != 32 || len(got) != auth.Size {
			c.Fail(errors.New("authentication: malformed proof"))
			return &AuthError{"malformed", fmt.Errorf("control channel: a malformed proof from the %s", c.peer)}
		} else {
			copy(nc, n)
		}
		if !auth.Equal(got, derive(secret, labelConsumerProof, np, nc)) {
			c.Fail(errors.New("authentication failed: the consumer's secret differs"))
			return &AuthError{"bad_proof", fmt.Errorf("control channel: the %s's proof is wrong (different secrets)", c.peer)}
		}
		if err := c.Send(Msg{Type: TypeAuth, Proof: hex.EncodeToString(derive(secret, labelProducerProof, np, nc))}); err != nil {
			return err
		}
		c.skey, c.rkey = derive(secret, labelProducerKey, np, nc), derive(secret, labelConsumerKey, np, nc)
		return nil
	}
	m, err := c.Recv(TypeChallenge)
	if err != nil {
		var ue *unexpectedError
		if errors.As(err, &ue) && ue.got == TypeHello {
			return fmt.Errorf("control channel: the %s has no secret, and this side has one: give both the same secret", c.peer)
		}
		return err
	}
	if n, err := hex.DecodeString(m.Nonce); err != nil || len(n) != 32 {
		return fmt.Errorf("control channel: a malformed challenge from the %s", c.peer)
	} else {
		copy(np, n)
	}
	rand.Read(nc)
	if err := c.Send(Msg{Type: TypeAuth, Nonce: hex.EncodeToString(nc), Proof: hex.EncodeToString(derive(secret, labelConsumerProof, np, nc))}); err != nil {
		return err
	}
	m, err = c.Recv(TypeAuth)
	if err != nil {
		return err
	}
	got, err := hex.DecodeString(m.Proof)
	if err != nil || !auth.Equal(got, derive(secret, labelProducerProof, np, nc)) {
		return fmt.Errorf("control channel: the %s could not prove it knows the secret (different secrets)", c.peer)
	}
	c.skey, c.rkey = derive(secret, labelConsumerKey, np, nc), derive(secret, labelProducerKey, np, nc)
	return nil
}

// Connect dials the producer at addr (as Dial does) and authenticates
// with secret, when there is one: it returns the Conn, whose every later
// message is authenticated.
func Connect(ctx context.Context, addr string, timeout time.Duration, secret string, say func(string)) (*Conn, error) {
	conn, err := Dial(ctx, addr, timeout, say)
	if err != nil {
		return nil, err
	}
	c := NewConn(ctx, conn, timeout, "producer")
	if err := c.authenticate(secret, false); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Serve listens on addr, the producer's, and returns the first consumer
// that authenticates with secret, waiting up to timeout in all. Each
// connection has authTimeout (DefaultAuthTimeout when 0) to authenticate,
// after which it is closed; refused hears of every connection that did
// not authenticate (remote address, reason, error), and may be nil.
// Without a secret there is nothing to prove, and the first connection is
// the consumer.
func Serve(ctx context.Context, addr string, timeout, authTimeout time.Duration, secret string, say func(string), refused func(remote, reason string, err error)) (*Conn, error) {
	if authTimeout <= 0 {
		authTimeout = DefaultAuthTimeout
	}
	authTimeout = min(authTimeout, timeout)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("control channel: listen on %s: %w", addr, err)
	}
	defer ln.Close()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // the connections still authenticating end at once: cancel closes them
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(timeout))
	say(fmt.Sprintf("waiting for the consumer on %s (up to %v)", addr, timeout))
	var mu sync.Mutex
	var last error // the latest refusal, for the timeout's error
	won := make(chan *Conn, 1)
	winner := func(c *Conn) *Conn {
		c.timeout = timeout
		c.stop()
		c.stop = context.AfterFunc(parent, func() { c.conn.SetDeadline(time.Now()) })
		return c
	}
	pending := make(chan struct{}, 64) // bounds the connections authenticating at once
	for {
		conn, err := ln.Accept()
		switch {
		case ctx.Err() != nil:
			if conn != nil {
				conn.Close()
			}
			select {
			case c := <-won:
				return winner(c), nil
			default:
			}
			return nil, context.Cause(parent)
		case errors.Is(err, os.ErrDeadlineExceeded):
			mu.Lock()
			defer mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("control channel: no consumer authenticated on %s within --timeout %v (last refused: %w)", addr, timeout, last)
			}
			return nil, fmt.Errorf("control channel: no consumer connected to %s within --timeout %v", addr, timeout)
		case err != nil:
			return nil, fmt.Errorf("control channel: accept on %s: %w", addr, err)
		}
		if secret == "" {
			return NewConn(parent, conn, timeout, "consumer"), nil
		}
		select {
		case pending <- struct{}{}:
		default:
			conn.Close()
			if refused != nil {
				refused(conn.RemoteAddr().String(), "not_allowed", errors.New("too many connections authenticating at once"))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-pending }()
			c := NewConn(ctx, conn, authTimeout, "consumer")
			if err := c.authenticate(secret, true); err != nil {
				c.Close()
				if ctx.Err() != nil {
					return // Serve is over: not a refusal
				}
				mu.Lock()
				last = err
				mu.Unlock()
				if refused != nil {
					reason := "no_proof"
					var ae *AuthError
					if errors.As(err, &ae) {
						reason = ae.Reason
					}
					refused(conn.RemoteAddr().String(), reason, err)
				}
				return
			}
			c.stop() // winner ties it to the caller's ctx instead
			select {
			case won <- c:
				cancel() // wakes Accept
			default:
				c.Close() // another consumer authenticated first
			}
		}()
	}
}

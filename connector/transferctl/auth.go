package transferctl

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/xferio/xfer/internal/auth"
)

// DefaultAuthTimeout bounds how long the producer waits for a connection
// to authenticate (without a secret: to answer hello with ready) before it
// drops it (ServeConfig.HandshakeTimeout).
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
			return &AuthError{refusal(err), err}
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
			c.Fail(errors.New("the consumer has a secret, and the producer none: give both the same secret"))
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

// refusal is the reason a connection's handshake failed with err.
func refusal(err error) string {
	var ae *AuthError
	var me *malformedError
	switch {
	case errors.As(err, &ae):
		return ae.Reason
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.As(err, &me):
		return "malformed"
	}
	return "no_proof"
}

package handshake

import (
	"bytes"

	"github.com/xferio/xfer/internal/auth"
	"github.com/xferio/xfer/internal/wire"
)

const (
	labelDialer   = "xfer-v2 dialer proof"
	labelAcceptor = "xfer-v2 acceptor proof"
)

// transcript hashes the hello's and the challenge's bodies.
func transcript(hello, challenge []byte) [32]byte { return auth.Transcript(hello, challenge) }

// proof is HMAC-SHA256(secret, label | transcript | more): the labels keep
// one side's proof from being replayed as the other's, the transcript's
// nonces keep it from being replayed on another connection.
func proof(secret, label string, th [32]byte, more []byte) (out [32]byte) {
	auth.NewKey([]byte(secret)).Sum(out[:0], label, th[:], more)
	return out
}

// DialerProof is the dialer's proof for the hello's and the challenge's
// bodies: what a dialer that knows secret sends in its auth.
func DialerProof(secret string, hello, challenge []byte) [32]byte {
	return proof(secret, labelDialer, transcript(hello, challenge), nil)
}

// welcomeProof is the acceptor's proof over a welcome's body, whose Proof
// field is ignored (taken as zero).
func welcomeProof(secret string, th [32]byte, body []byte) [32]byte {
	b := bytes.Clone(body)
	if len(b) >= wire.WelcomeProofOffset+32 {
		clear(b[wire.WelcomeProofOffset : wire.WelcomeProofOffset+32])
	}
	return proof(secret, labelAcceptor, th, b)
}

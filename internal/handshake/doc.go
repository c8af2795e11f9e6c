// Package handshake speaks the engine's handshake: the messages that open
// a peer connection (hello, challenge, auth, welcome), the proofs that
// authenticate both sides with a shared secret, the refusals (a result)
// and the joins that add a connection to an established one. Which
// transport to choose, which peer a connection belongs to and what to do
// with it once welcomed are the engine's; this package only moves and
// checks the messages (internal/wire encodes them).
//
// The handshake with a secret (protocol version 2):
//
//	dialer   → hello      versions, identity, nonce, transports offered
//	acceptor → challenge  version, caps, a random nonce, whether auth is required
//	dialer   → auth       HMAC(secret, dialer label | transcript)
//	acceptor → welcome    identity, transport, exports, and
//	                      HMAC(secret, acceptor label | transcript | welcome)
//
// where the transcript is SHA-256 over the hello's and the challenge's
// bodies. The dialer proves first, and the acceptor sends nothing derived
// from the secret, nor its engine ID, host ID or PID, before that proof
// checks: a scanner learns a nonce and that a secret is required. The
// acceptor's proof covers the welcome, so a man in the middle cannot
// change the transport, the blobs or the exports it carries.
//
// The dialer's proof goes to whoever listens at the address it dialed,
// which a forged directory entry can choose. A proof is worthless offline
// only if the secret cannot be guessed, so a secret has at least
// auth.MinSecretLen bytes (128 bits when random; `xfer secret` makes 256).
// A PAKE (CPace, SPAKE2) would make weak secrets safe too, but no Go module
// we would trust for it is maintained today: x/crypto has none.
//
// # Threading and lifetimes
//
// Every function runs on one connection, in the caller's goroutine, and
// returns when the exchange ends, the connection's deadline passes or the
// context ends. The caller owns the connection throughout: on an error it
// closes it (Join closes its own).
package handshake

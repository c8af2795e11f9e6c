// Package auth holds the authentication primitives every plane of xfer
// uses, written once: the engine's handshake, the KV service's
// connections and calls, the transfer control channel and the
// coordinator's token.
//
//   - Key is a shared secret keyed once for HMAC-SHA256. Its Sum is
//     HMAC-SHA256(secret, label | parts...): a proof when the parts are
//     the nonces or the transcript of an exchange, a derived key (one per
//     purpose and direction) when the caller keys a new Key with it. The
//     label names the purpose, so no MAC made for one can stand for
//     another. Verify checks a MAC in constant time.
//   - Transcript is SHA-256 over length-prefixed messages: what a
//     handshake's proofs cover.
//   - Equal compares two secrets or MACs in constant time.
//   - Window is a replay window: it accepts each sequence number once,
//     and none older than WindowSize below the highest it has seen.
//     Senders keeps a Window per sender ID, for timestamped calls: a
//     sender unseen for two spans is forgotten, and their number is bounded.
//   - Allowlist is the networks callers may connect from; ParseGIDs reads
//     the RDMA GIDs they may connect with.
//   - MinSecretLen, GenerateSecret, ReadSecretFile and CheckSecret: the
//     shared secrets and tokens every plane reads from files.
//   - The Reason* constants are the bounded set of refusal reasons.
//   - Warnings says which refusals to log at Warn (a source's first, then
//     one a minute), and Source names a refusal's source.
//
// The wire formats are the callers': each decides its labels and the
// order of its parts, and docs/SECURITY.md lists them. The package uses
// the standard library only.
//
// Threading: a Key, Senders and Warnings are safe for concurrent use (a Key pools
// its keyed hashes); Transcript, Equal and Source are pure functions; an
// Allowlist is read-only once parsed; a Window is for one goroutine at a
// time, its owner locks it. Lifetimes: a Key holds a copy of its secret
// until it is garbage; nothing needs closing.
package auth

package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"
)

// Size is the length of a MAC and of a transcript: SHA-256's.
const Size = sha256.Size

// Key is a secret keyed once for HMAC-SHA256: a MAC costs the hashing of
// its own bytes, not a new HMAC (which hashes the key's two pads and
// allocates) each time. Safe for concurrent use.
type Key struct{ pool sync.Pool }

// state is one keyed HMAC, the scratch its messages are built in, and
// room for its sum.
type state struct {
	h   hash.Hash
	msg []byte
	sum [Size]byte
}

// NewKey returns secret keyed for HMAC-SHA256. It keeps a copy of secret.
func NewKey(secret []byte) *Key {
	secret = bytes.Clone(secret)
	k := &Key{}
	k.pool.New = func() any { return &state{h: hmac.New(sha256.New, secret), msg: make([]byte, 0, 128)} }
	return k
}

// Sum appends HMAC-SHA256(secret, label | parts...) to dst, the parts
// concatenated as they are: a caller whose parts vary in length fixes
// their layout itself. It allocates nothing once its pool is warm.
func (k *Key) Sum(dst []byte, label string, parts ...[]byte) []byte {
	st := k.pool.Get().(*state)
	st.msg = append(st.msg[:0], label...)
	for _, p := range parts {
		st.msg = append(st.msg, p...)
	}
	st.h.Reset()
	st.h.Write(st.msg)
	dst = append(dst, st.h.Sum(st.sum[:0])...)
	k.pool.Put(st)
	return dst
}

// Verify reports, in constant time, whether got is Sum(label, parts...).
func (k *Key) Verify(got []byte, label string, parts ...[]byte) bool {
	var want [Size]byte
	return Equal(got, k.Sum(want[:0], label, parts...))
}

// Equal reports whether a and b are equal, in a time that depends on
// their lengths only: for MACs, and for tokens compared as they are.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }

// Transcript is SHA-256 over the messages, each preceded by its length
// (a little-endian uint32), so that no two lists of messages hash alike.
func Transcript(msgs ...[]byte) [Size]byte {
	h := sha256.New()
	var n [4]byte
	for _, m := range msgs {
		binary.LittleEndian.PutUint32(n[:], uint32(len(m)))
		h.Write(n[:])
		h.Write(m)
	}
	var out [Size]byte
	h.Sum(out[:0])
	return out
}

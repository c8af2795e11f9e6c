package connector

import (
	"time"

	"github.com/xferio/xfer"
)

// slot is a value a producer keeps for consumers.
type slot struct {
	key     string
	meta    Meta
	buf     xfer.Buffer // zero for an empty value
	left    int         // takes left before the slot is freed; 0: kept until Cleanup
	claims  int         // consumers moving the value now
	deleted bool        // out of the table: freed when the last claim ends
	expires time.Time   // zero: never
}

func (s *slot) available() bool { return !s.deleted && (s.left == 0 || s.claims < s.left) }

func (s *slot) data() []byte {
	if s.meta.Size == 0 {
		return nil
	}
	return s.buf.Bytes()[:s.meta.Size]
}

// claimKey names a consumer's get: its connection and its id.
type claimKey struct {
	peer *xfer.Peer
	id   uint32
}

// claim is a consumer's get of a slot, from the answer to the release.
type claim struct {
	s        *slot
	deadline time.Time // zero: none
}

// waiter is a get for a key not put yet.
type waiter struct {
	peer *xfer.Peer
	req  request
}

package transferctl

import (
	"encoding/binary"

	"github.com/xferio/xfer/internal/auth"
)

// macLen is the length of a line's MAC prefix: 64 hex digits and a space.
const macLen = 2*auth.Size + 1

// lineMAC is HMAC-SHA256(key, counter | message), the counter being the
// number of earlier lines this direction carried since authentication.
func lineMAC(key []byte, n uint64, msg []byte) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	return auth.NewKey(key).Sum(nil, "", b[:], msg)
}

package shm

import "github.com/xferio/xfer/transport"

// UsesRing reports whether ep's messages take the message ring.
func UsesRing(ep transport.Endpoint) bool {
	e, ok := ep.(*Endpoint)
	return ok && e.msgs != nil
}

package xfer

import "github.com/xferio/xfer/transport"

// UseTransport makes the engines opened from now on also offer the
// transport newTransport returns, first, whatever their policy (see
// extraTransport), until restore is called. Tests that use it must not
// run in parallel with tests that open engines.
func UseTransport(newTransport func() transport.Transport) (restore func()) {
	old := extraTransport
	extraTransport = newTransport
	return func() { extraTransport = old }
}

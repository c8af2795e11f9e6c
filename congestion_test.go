//go:build linux

package xfer

import (
	"context"
	"net"
	"testing"

	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/transport/tcp"
)

// The policy itself is tested in transport/tcp (congestion_internal_test.go).

// TestEngineListenerCongestion: an engine's listener carries reno under
// auto, which its accepted connections inherit.
func TestEngineListenerCongestion(t *testing.T) {
	e, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", MemoryMB: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rc, err := e.ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sys.Congestion(rc); err != nil || got != tcp.SameHostCongestion {
		t.Errorf("the engine's listener runs %q (%v), want %s", got, err, tcp.SameHostCongestion)
	}
}

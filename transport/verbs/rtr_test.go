package verbs_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/verbs"
)

// A queue pair that cannot be brought to RTR with the peer's attributes
// (a GID the port cannot route, an MTU above the device's): the error names
// both sides' GID, MTU and LID and what differs, keeps the errno, and
// matches ErrNotSupported, so that the auto policy falls back instead of
// failing the Dial. No device is needed: the attributes are the
// handshake's.
func TestRTRErrorNamesThePath(t *testing.T) {
	l := &wire.VerbsInfo{Device: "rxe0", Port: 1, GIDIndex: 1, MTU: 1024, LID: 0,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 1}}
	r := &wire.VerbsInfo{Device: "rxe1", Port: 1, GIDIndex: 3, MTU: 4096, LID: 7,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 2}}
	err := verbs.RTRError(syscall.EINVAL, l, r, 1024)
	if !errors.Is(err, transport.ErrNotSupported) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("%v: want ErrNotSupported and EINVAL", err)
	}
	for _, want := range []string{"10.0.0.1", "10.0.0.2", "mtu 1024", "mtu 4096", "lid 7", "active MTU 1024 vs 4096", "GID index 1 vs 3", "RTR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}

package xfer_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/sys"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/shm"
	"github.com/xferio/xfer/transport/verbs"
)

// TestErrNotSupportedAcrossLayers checks that the module has one
// not-supported sentinel: a not-supported error made by any layer (the
// system calls, the verbs binding, the memory layer, a transport) matches
// xfer.ErrNotSupported, and the sentinels of the layers are one value.
func TestErrNotSupportedAcrossLayers(t *testing.T) {
	sentinels := map[string]error{
		"internal/sys":    sys.ErrNotSupported,
		"internal/ibv":    ibv.ErrNotSupported,
		"mem":             mem.ErrNotSupported,
		"transport":       transport.ErrNotSupported,
		"xfer (the root)": xfer.ErrNotSupported,
	}
	for name, s := range sentinels {
		if s != sys.ErrNotSupported {
			t.Errorf("%s.ErrNotSupported is a sentinel of its own (%p), not internal/sys's (%p)", name, s, sys.ErrNotSupported)
		}
	}

	shmT := shm.New()
	defer shmT.Close()
	vt := verbs.New(verbs.Config{Device: "xfer-no-such-device"}, nil)
	defer vt.Close()
	_, ibvOpenErr := ibv.Open("xfer-no-such-device")
	errs := map[string]error{
		// What the *_other.go twins of internal/sys return.
		"sys (other platforms)": fmt.Errorf("memfd_create %q: %w", "x", sys.ErrNotSupported),
		"ibv.ErrNoDevice":       ibv.ErrNoDevice,
		"ibv.LibraryError":      &ibv.LibraryError{Library: "libibverbs.so.1", Detail: "not found", Fix: "install it"},
		// No library, no device, or no device of that name: on every host
		// an error that matches ErrNotSupported.
		"ibv.Open":              ibvOpenErr,
		"mem (other platforms)": fmt.Errorf("mmap 4096 bytes: %w", mem.ErrNotSupported),
		"shm.Usable":            shmT.Usable(transport.PeerInfo{HostID: [16]byte{1}}, transport.PeerInfo{HostID: [16]byte{2}}),
		"verbs.Available":       vt.Available(),
	}
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !errors.Is(err, xfer.ErrNotSupported) {
			t.Errorf("%s: %v does not match xfer.ErrNotSupported", name, err)
		}
		if !errors.Is(err, transport.ErrNotSupported) || !errors.Is(err, mem.ErrNotSupported) {
			t.Errorf("%s: %v does not match transport's and mem's ErrNotSupported", name, err)
		}
	}
	// And an unrelated error does not match.
	if errors.Is(errors.New("not supported"), xfer.ErrNotSupported) {
		t.Error("an error with the same text matches xfer.ErrNotSupported")
	}
}

//go:build !cgo || !linux

package ibv

import (
	"errors"
	"strings"
	"testing"
)

// TestNotSupported checks that, in a build without verbs, every entry point
// fails with ErrNotSupported and says why.
func TestNotSupported(t *testing.T) {
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNotSupported", what, err)
		} else if !strings.Contains(err.Error(), unsupportedReason) {
			t.Errorf("%s: %q does not say why", what, err)
		}
	}
	check("Load", Load())
	_, err := Devices()
	check("Devices", err)
	_, err = Open("")
	check("Open", err)
	_, err = DeviceNames()
	check("DeviceNames", err)
	var c *Context
	_, err = c.AllocPD()
	check("AllocPD", err)
	_, err = c.CreateCQ(0, nil)
	check("CreateCQ", err)
	var qp *QP
	_, err = qp.PostSend([]SendWR{{}})
	check("PostSend", err)
	var cq *CQ
	_, err = cq.Poll(make([]WC, 1))
	check("Poll", err)
	if c.Close() != nil || qp.Close() != nil || cq.Close() != nil {
		t.Error("Close failed")
	}
	if !Live().IsZero() {
		t.Error("Live is not zero")
	}
}

package xfer

import (
	"io"
	"testing"
)

// TestTransportTableCaps: each row's caps, read before any transport is
// built, are what the transport it opens states (one definition, in the
// transport's package).
func TestTransportTableCaps(t *testing.T) {
	cfg, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range transportTable {
		tr := r.open(&cfg)
		if got := tr.Caps(); got != r.caps {
			t.Errorf("%s: the table says %+v, the transport %+v", r.name, r.caps, got)
		}
		if c, ok := tr.(io.Closer); ok {
			c.Close()
		}
	}
}

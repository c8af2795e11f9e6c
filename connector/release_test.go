package connector

import (
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestReleaseSurvivesClose: a consumer that closes right after its Get
// still has its value counted as taken. Before consumers synced with their
// producers at Close, closing the engine dropped releases its transport
// had not sent yet, and the producer kept such values for the TTL.
func TestReleaseSurvivesClose(t *testing.T) {
	for _, pull := range []Pull{PullRead, PullWrite} {
		t.Run(pull.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := Open(ctx, Config{Role: RoleProducer, Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			const n = 20
			for i := range n {
				if _, _, err := p.Put(ctx, "a", "b", string(rune('a'+i)), []byte("value")); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				c, err := Open(ctx, Config{Role: RoleConsumer, Pull: pull, Producer: p.Addr(), Engine: xfer.Config{Transport: xfer.PolicyTCP}})
				if err != nil {
					t.Fatal(err)
				}
				b, _, err := c.Get(ctx, "a", "b", string(rune('a'+i)), nil)
				if err != nil {
					t.Fatal(err)
				}
				b.Release()
				c.Close()
			}
			// The producer handles the last release before it answers the
			// last consumer's sync, so the count is complete now.
			if h := p.Health(); h.Served != n || h.Slots != 0 {
				t.Fatalf("after %d consumers took a value each and closed: served %d, %d slots left", n, h.Served, h.Slots)
			}
		})
	}
}

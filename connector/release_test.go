package connector

import (
	"context"
	"fmt"
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

// TestReleasesCarried: a stream of gets to one producer sends one message
// each way per get, each get carrying the releases held back since the
// one before; the producer ends those claims before it answers the get
// that carries them. A lone get's release leaves on its own, within
// releaseDelay.
func TestReleasesCarried(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx := ctxT(t)
		before := carriedReleases.Load()
		want := random(512)
		const gets = 20
		for i := range gets {
			key := fmt.Sprint("k", i)
			if _, _, err := p.Put(ctx, "a", "b", key, want, Consumers(1)); err != nil {
				t.Fatal(err)
			}
			// This get carries the release of the one before, if
			// releaseDelay has not sent it already: either way that
			// value is taken before this get is answered.
			getBytes(t, ctx, c, key, nil, want)
			if i > 0 {
				if ok, err := p.Stored("a", "b", fmt.Sprint("k", i-1)); err != nil || ok {
					t.Fatalf("get %d: the value of the get before is still stored (%v, %v)", i, ok, err)
				}
			}
		}
		if n := carriedReleases.Load() - before; n == 0 {
			t.Errorf("%d gets in a row carried no release", gets)
		}
		// Nothing carries the last release: it leaves on its own.
		drained(t, p)
	})
}

// TestCarriedReleasesOlderProducer: a producer from before carried
// releases refuses a get that carries some ("unknown flags"); the consumer
// sends them on their own, asks again, and sends that producer its
// releases on their own from then on. Every value is counted as taken.
func TestCarriedReleasesOlderProducer(t *testing.T) {
	testNoCarried.Store(true)
	t.Cleanup(func() { testNoCarried.Store(false) })
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx := ctxT(t)
		want := random(100)
		for i := range 10 {
			key := fmt.Sprint("k", i)
			_, m, err := p.Put(ctx, "a", "b", key, want, Consumers(1))
			if err != nil {
				t.Fatal(err)
			}
			getBytes(t, ctx, c, key, &m, want)
		}
		drained(t, p)
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.remote {
			if !r.noCarry.Load() {
				t.Fatal("the consumer still has gets carry releases to the older producer")
			}
			if r.noInline.Load() {
				t.Fatal("the consumer took the older producer for one from before inline values")
			}
		}
	})
}

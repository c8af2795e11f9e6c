package connector

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBeyondTheGuide covers what this connector does beyond Mooncake's,
// which serves one consumer per key: one value for several consumers,
// values retained until Cleanup, the TTL that reclaims a value no consumer
// takes, and gets that know only the producer's address.
func TestBeyondTheGuide(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		t.Run("ThreeConsumers", func(t *testing.T) { testThreeConsumers(t, tp, pull) })
		t.Run("Retain", func(t *testing.T) { testRetain(t, tp, pull) })
		t.Run("TTL", func(t *testing.T) { testTTL(t, tp, pull) })
		t.Run("PartialMetadata", func(t *testing.T) { testPartialMeta(t, tp, pull) })
	})
}

func testThreeConsumers(t *testing.T, tp tport, pull Pull) {
	p, c1 := pair(t, tp, pull, nil)
	cc := consumerConfig(tp, pull)
	cc.Producer = p.Addr()
	cs := []*Connector{c1, open(t, cc), open(t, cc)}
	ctx := ctxT(t)
	v := random(3<<20 + 7)
	_, m, err := p.Put(ctx, "a", "b", "k", v, Consumers(3))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		getBytes(t, ctx, c, "k", &m, v)
		if i < 2 {
			// Still there for the next consumer.
			eventually(t, "served", func() bool { return p.Health().Served == int64(i+1) })
			if h := p.Health(); h.Slots != 1 {
				t.Fatalf("after %d gets: %+v", i+1, h)
			}
		}
	}
	// Freed after the third.
	drained(t, p)
	if h := p.Health(); h.Served != 3 {
		t.Errorf("health %+v", h)
	}
	if _, _, err := cs[0].Get(ctx, "a", "b", "k", &m, NoWait()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a fourth get: %v, want ErrNotFound", err)
	}
	for _, c := range cs {
		if h := c.Health(); h.PoolUsed != 0 {
			t.Errorf("consumer health %+v", h)
		}
	}
	// A value needs a consumer: Consumers(0) and a negative count are
	// errors (Retain keeps a value for any number).
	for _, n := range []int{0, -1} {
		if _, _, err := p.Put(ctx, "a", "b", "neg", v, Consumers(n)); err == nil || !strings.Contains(err.Error(), "at least one consumer") {
			t.Fatalf("put for %d consumers: %v", n, err)
		}
	}
	drained(t, p)
}

func testRetain(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	v := random(100_000)
	_, m, err := p.Put(ctx, "a", "b", "k", v, Retain())
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		getBytes(t, ctx, c, "k", &m, v)
	}
	eventually(t, "served 7 times", func() bool { return p.Health().Served == 7 })
	if h := p.Health(); h.Slots != 1 || h.PoolUsed == 0 {
		t.Fatalf("a retained value after 7 gets: %+v", h)
	}
	if ok, err := p.Cleanup("a", "b", "k"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	drained(t, p)
	if _, _, err := c.Get(ctx, "a", "b", "k", &m, NoWait()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after cleanup: %v", err)
	}
}

func testTTL(t *testing.T, tp tport, pull Pull) {
	// The TTL also bounds a consumer's claim, which a slow get (SoftRoCE
	// under emulation) could outlive: this test gets nothing but a
	// not-found, so that only values expire.
	p, c := pair(t, tp, pull, func(p, c *Config) { p.TTL = 200 * time.Millisecond })
	ctx := ctxT(t)
	if _, _, err := p.Put(ctx, "a", "b", "nobody", random(1<<20)); err != nil {
		t.Fatal(err)
	}
	// Retain and a negative WithTTL keep a value past the TTL.
	if _, _, err := p.Put(ctx, "a", "b", "retained", random(1000), Retain()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Put(ctx, "a", "b", "forever", random(1000), WithTTL(-1)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "reclaimed", func() bool { h := p.Health(); return h.Expired == 1 && h.Slots == 2 })
	if _, _, err := c.Get(ctx, "a", "b", "nobody", nil, NoWait()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a reclaimed value: %v, want ErrNotFound", err)
	}
	for _, k := range []string{"retained", "forever"} {
		if ok, err := p.Cleanup("a", "b", k); !ok || err != nil {
			t.Fatalf("cleanup of %s: %v, %v", k, ok, err)
		}
	}
	drained(t, p)
	if h := p.Health(); h.Expired != 1 {
		t.Errorf("health %+v", h)
	}
}

func testPartialMeta(t *testing.T, tp tport, pull Pull) {
	p := open(t, producerConfig(tp, pull))
	c := open(t, consumerConfig(tp, pull)) // no Config.Producer
	ctx := ctxT(t)
	x := randomTensor(I32, []int64{5, 7})
	if _, _, err := p.Put(ctx, "a", "b", "t", x); err != nil {
		t.Fatal(err)
	}
	b, n, err := c.Get(ctx, "a", "b", "t", &Meta{Producer: p.Addr()})
	if err != nil || n != 140 {
		t.Fatal(n, err)
	}
	got, err := b.Tensor()
	if err != nil || got.DType != I32 || len(got.Shape) != 2 || got.Shape[1] != 7 {
		t.Fatalf("the producer's metadata: %+v, %v", b.Meta(), err)
	}
	if m := b.Meta(); m.Producer != p.Addr() || m.Key != "a/b/t" {
		t.Errorf("meta %+v", m)
	}
	b.Release()
	// Without an address and without Config.Producer there is no one to ask.
	for _, m := range []*Meta{nil, {}} {
		if _, _, err := c.Get(ctx, "a", "b", "t", m); err == nil || !strings.Contains(err.Error(), "no producer") {
			t.Errorf("get with no producer: %v", err)
		}
	}
	drained(t, p)
}

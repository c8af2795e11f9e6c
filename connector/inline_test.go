package connector

import (
	"bytes"
	"fmt"
	"testing"
)

// TestInlineValues gets values on both sides of inlineMax, which travel in
// the producer's answer and by a one-sided operation, by either pull, with
// full metadata, the producer's address alone, none, and metadata wrong
// about the size: each arrives whole, and each take is counted once.
func TestInlineValues(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx := ctxT(t)
		for _, n := range []int{0, 1, inlineMax - 1, inlineMax, inlineMax + 1, 3 * inlineMax} {
			for _, how := range []string{"full", "producer", "none", "wrong-size"} {
				key := fmt.Sprintf("%d-%s", n, how)
				want := random(n)
				_, m, err := p.Put(ctx, "a", "b", key, want, Consumers(2))
				if err != nil {
					t.Fatal(err)
				}
				var arg *Meta
				switch how {
				case "full":
					arg = &m
				case "producer":
					arg = &Meta{Producer: m.Producer}
				case "wrong-size":
					wrong := m
					wrong.Size = int64(n + 8)
					arg = &wrong
				}
				getBytes(t, ctx, c, key, arg, want)
				if ok, _ := p.Stored("a", "b", key); !ok {
					t.Fatalf("%s: gone after one of its two consumers", key)
				}
				getBytes(t, ctx, c, key, &m, want)
				eventually(t, key+" taken twice", func() bool { ok, _ := p.Stored("a", "b", key); return !ok })
			}
		}
		// A get that waits for its key is answered by the Put, off the
		// receive path: the answer leaves from a goroutine.
		want := random(inlineMax)
		got := make(chan error, 1)
		go func() {
			b, _, err := c.Get(ctx, "a", "b", "later", nil)
			if err == nil {
				if !bytes.Equal(b.Bytes(), want) {
					err = fmt.Errorf("%d bytes, not the %d put", b.Size(), len(want))
				}
				b.Release()
			}
			got <- err
		}()
		eventually(t, "a waiting get", func() bool { return p.Health().Waiting == 1 })
		if _, _, err := p.Put(ctx, "a", "b", "later", want); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("a get that waited: %v", err)
		}
		drained(t, p)
		if h := c.Health(); h.PoolUsed != 0 || h.Errors != 0 {
			t.Errorf("consumer: %+v", h)
		}
	})
}

// TestInlineValuesOlderProducer: a producer from before inline values
// refuses a get that asks for one ("unknown flags"); the consumer asks
// again without, and asks that producer no more.
func TestInlineValuesOlderProducer(t *testing.T) {
	testNoInline.Store(true)
	t.Cleanup(func() { testNoInline.Store(false) })
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx := ctxT(t)
		for _, n := range []int{1, inlineMax} {
			for _, full := range []bool{true, false} {
				key := fmt.Sprintf("%d-%v", n, full)
				want := random(n)
				_, m, err := p.Put(ctx, "a", "b", key, want)
				if err != nil {
					t.Fatal(err)
				}
				var arg *Meta
				if full {
					arg = &m
				}
				getBytes(t, ctx, c, key, arg, want)
			}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.remote {
			if !r.noInline.Load() {
				t.Fatal("the consumer still asks the older producer for inline values")
			}
		}
	})
}

package connector

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, n := range []int{0, 1, 4096, 3<<20 + 5} {
			v := make([]byte, n)
			for i := range v {
				v[i] = byte(i*7 + n)
			}
			size, meta, err := p.Put(ctx, "a", "b", "k", v)
			if err != nil || size != int64(n) {
				t.Fatal(size, err)
			}
			for _, m := range []*Meta{&meta, {Producer: meta.Producer}, nil} {
				if m != &meta {
					if _, _, err := p.Put(ctx, "a", "b", "k", v); err != nil {
						t.Fatal(err)
					}
				}
				b, got, err := c.Get(ctx, "a", "b", "k", m)
				if err != nil {
					t.Fatalf("get %d: %v", n, err)
				}
				if got != int64(n) || !bytes.Equal(b.Bytes(), v[:n:n]) && n > 0 {
					t.Fatalf("get %d: got %d bytes, wrong data", n, got)
				}
				b.Release()
			}
		}
		_, _, err := c.Get(ctx, "a", "b", "nope", nil, NoWait())
		if !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		t.Log(err, p.Health(), c.Health())
	})
}

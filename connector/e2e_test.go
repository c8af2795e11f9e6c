package connector

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// pair opens a producer and a consumer on policy, pulling by pull.
func pair(t testing.TB, policy xfer.Policy, pull Pull, mod func(p, c *Config)) (*Connector, *Connector) {
	t.Helper()
	pc := Config{Role: RoleProducer, Pull: pull, Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: policy, MemoryMB: 64}}
	cc := Config{Role: RoleConsumer, Pull: pull, Engine: xfer.Config{Transport: policy, MemoryMB: 64}}
	if mod != nil {
		mod(&pc, &cc)
	}
	ctx := context.Background()
	p, err := Open(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cc.Producer = p.Addr()
	c, err := Open(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

func TestSmoke(t *testing.T) {
	policies := []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM}
	if os.Getenv("RDMA_VM") != "" {
		policies = []xfer.Policy{xfer.PolicyRDMA}
	}
	for _, policy := range policies {
		for _, pull := range []Pull{PullRead, PullWrite} {
			t.Run(string(policy)+"/"+pull.String(), func(t *testing.T) {
				p, c := pair(t, policy, pull, func(p, c *Config) { p.ChunkSize, c.ChunkSize = 1<<20, 1<<20 })
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
	}
}

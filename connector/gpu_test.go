package connector

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mem"
)

// gpuPair is a producer and a consumer whose pools are both on GPU 0.
func gpuPair(t *testing.T, tp tport, pull Pull, mb int) (*Connector, *Connector) {
	return pair(t, tp, pull, func(p, c *Config) {
		p.Engine.MemoryDevice, c.Engine.MemoryDevice = mem.CUDA(0), mem.CUDA(0)
		p.Engine.MemoryMB, c.Engine.MemoryMB = mb, mb
	})
}

// hostCopy is b, which may be GPU memory, copied into host memory by c's
// engine.
func hostCopy(t *testing.T, c *Connector, b []byte) []byte {
	t.Helper()
	h := make([]byte, len(b))
	if err := c.Engine().Copy(h, b); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestGPUPool is vLLM-Omni's TestGPUPool in Go: a connector whose pool is
// on a GPU puts a host tensor and a GPU tensor, and a consumer whose pool
// is on a GPU gets them, over tcp (staging) and shm (CUDA IPC; between
// connectors of one process, the device addresses), pulling by WRITE and
// by READ, of 1 element, 1 MiB and 64 MiB, MD5 verified; an object
// decodes from GPU memory.
func TestGPUPool(t *testing.T) {
	testutil.RequireCUDA(t)
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := gpuPair(t, tp, pull, 200)
		ctx := ctxT(t)
		if loc := p.Engine().DefaultRegion().Location(); loc != mem.CUDA(0) {
			t.Fatalf("the producer's pool is in %s", loc)
		}
		for _, n := range []int64{1, 1 << 18, 16 << 20} { // f32 elements: 4 B, 1 MiB, 64 MiB
			want := random(int(4 * n))
			key := fmt.Sprintf("host-%d", n)
			if _, _, err := p.Put(ctx, "a", "b", key, Tensor{DType: F32, Shape: []int64{n}, Data: want}); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			checkGPUGet(t, ctx, c, key, want)

			// A tensor already on the GPU: AllocTensor, filled through
			// the engine, published without a copy.
			b, err := p.AllocTensor(ctx, F32, []int64{n})
			if err != nil {
				t.Fatal(err)
			}
			if b.Location() != mem.CUDA(0) {
				t.Fatalf("AllocTensor in %s", b.Location())
			}
			want = random(int(4 * n))
			if err := p.Engine().Copy(b.Bytes(), want); err != nil {
				t.Fatal(err)
			}
			key = fmt.Sprintf("gpu-%d", n)
			if _, _, err := p.PutBuffer(ctx, "a", "b", key, b); err != nil {
				t.Fatal(err)
			}
			checkGPUGet(t, ctx, c, key, want)
		}
		type obj struct{ A, B string }
		if _, _, err := p.Put(ctx, "a", "b", "obj", obj{"x", "y"}); err != nil {
			t.Fatal(err)
		}
		b, _, err := c.Get(ctx, "a", "b", "obj", nil)
		if err != nil {
			t.Fatal(err)
		}
		var o obj
		if err := b.Decode(&o); err != nil || o != (obj{"x", "y"}) {
			t.Fatalf("decode from GPU memory: %+v, %v", o, err)
		}
		b.Release()
		drained(t, p)
	})
}

func checkGPUGet(t *testing.T, ctx context.Context, c *Connector, key string, want []byte) {
	t.Helper()
	b, n, err := c.Get(ctx, "a", "b", key, nil)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer b.Release()
	if n != int64(len(want)) || b.Location() != mem.CUDA(0) {
		t.Fatalf("get %s: %d bytes in %s", key, n, b.Location())
	}
	if got := hostCopy(t, c, b.Bytes()); md5.Sum(got) != md5.Sum(want) {
		t.Fatalf("get %s: MD5 differs", key)
	}
}

// TestGPUConcurrentPutGet: producers and consumers of GPU pools at work
// together, each value checked.
func TestGPUConcurrentPutGet(t *testing.T) {
	testutil.RequireCUDA(t)
	eachTransport(t, func(t *testing.T, tp tport) {
		p, c := gpuPair(t, tp, PullWrite, 256)
		ctx := ctxT(t)
		const workers, each, size = 8, 6, 3<<20 + 5
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					key := fmt.Sprintf("w%d-%d", w, i)
					want := random(size)
					if _, _, err := p.Put(ctx, "a", "b", key, want); err != nil {
						errs <- err
						return
					}
					b, _, err := c.Get(ctx, "a", "b", key, nil)
					if err != nil {
						errs <- err
						return
					}
					got := make([]byte, size)
					err = c.Engine().Copy(got, b.Bytes())
					b.Release()
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, want) {
						errs <- errors.New(key + ": wrong bytes")
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		drained(t, p)
	})
}

package connector

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// The mem package tests the pool's allocator; these tests cover what the
// connector adds on top of it: managed buffers with typed views, and the
// Alloc methods that hand producers pool memory to fill in place.

// TestManagedBuffer checks the Buffer a Get returns: its views of bytes,
// tensors and objects, Release and Close, and use after Release.
func TestManagedBuffer(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		p, c := pair(t, tp, pull, nil)
		ctx := ctxT(t)
		x := randomTensor(F64, []int64{4, 8})
		raw := random(777)
		type obj struct{ A, B string }
		for key, v := range map[string]any{"t": x, "b": raw, "o": obj{"x", "y"}} {
			if _, _, err := p.Put(ctx, "a", "b", key, v); err != nil {
				t.Fatal(err)
			}
		}
		get := func(key string) *Buffer {
			t.Helper()
			b, _, err := c.Get(ctx, "a", "b", key, nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}

		t.Run("Views", func(t *testing.T) {
			tb := get("t")
			defer tb.Close()
			got, err := tb.Tensor()
			if err != nil || !bytes.Equal(got.Data, x.Data) {
				t.Fatal(err)
			}
			v, err := View[float64](got)
			if err != nil || len(v) != 32 {
				t.Fatalf("view: %d, %v", len(v), err)
			}
			if &v[0] != (*float64)(unsafe.Pointer(&tb.Bytes()[0])) {
				t.Error("the view copies the buffer")
			}
			if _, err := View[float32](got); !errors.Is(err, ErrShape) {
				t.Errorf("F64 viewed as float32: %v", err)
			}
			if _, err := View[int64](got); !errors.Is(err, ErrShape) {
				t.Errorf("F64 viewed as int64: %v", err)
			}
			// A view of data off its alignment fails.
			mis := Tensor{DType: F64, Shape: []int64{3}, Data: tb.Bytes()[1:25]}
			if _, err := View[float64](mis); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "aligned") {
				t.Errorf("misaligned view: %v", err)
			}
			if err := tb.Decode(new(any)); err == nil {
				t.Error("a tensor decoded as an object")
			}
			// Meta returns a copy.
			m := tb.Meta()
			m.Shape[0] = 99
			if tb.Meta().Shape[0] != 4 {
				t.Error("Meta's shape aliases the buffer's")
			}

			bb := get("b")
			defer bb.Close()
			if !bytes.Equal(bb.Bytes(), raw) {
				t.Error("bytes")
			}
			if _, err := bb.Tensor(); err == nil || !strings.Contains(err.Error(), "not a tensor") {
				t.Errorf("bytes as a tensor: %v", err)
			}
			if err := bb.Decode(new(any)); err == nil || !strings.Contains(err.Error(), "not an object") {
				t.Errorf("bytes as an object: %v", err)
			}

			ob := get("o")
			defer ob.Close()
			var o obj
			if err := ob.Decode(&o); err != nil || o.A != "x" {
				t.Fatal(o, err)
			}
		})
		t.Run("Release", func(t *testing.T) {
			for _, v := range []any{x, raw, obj{"x", "y"}} {
				if _, _, err := p.Put(ctx, "a", "b", "r", v); err != nil {
					t.Fatal(err)
				}
				b := get("r")
				if c.Health().PoolUsed == 0 {
					t.Fatal("a received buffer takes no pool memory")
				}
				for range 2 {
					if err := b.Release(); err != nil {
						t.Fatal(err)
					}
					if err := b.Close(); err != nil {
						t.Fatal(err)
					}
				}
				if h := c.Health(); h.PoolUsed != 0 {
					t.Fatalf("pool use %d after Release", h.PoolUsed)
				}
				if b.Bytes() != nil {
					t.Error("bytes after Release")
				}
				if _, err := b.Tensor(); b.Meta().Kind == KindTensor && !errors.Is(err, ErrReleased) {
					t.Errorf("Tensor after Release: %v", err)
				}
				if err := b.Decode(new(obj)); b.Meta().Kind == KindObject && !errors.Is(err, ErrReleased) {
					t.Errorf("Decode after Release: %v", err)
				}
				if b.Size() == 0 {
					t.Error("the size went with the memory")
				}
			}
		})
		t.Run("DeferClose", func(t *testing.T) {
			if _, _, err := p.Put(ctx, "a", "b", "d", raw); err != nil {
				t.Fatal(err)
			}
			func() {
				b := get("d")
				defer b.Close()
				if !bytes.Equal(b.Bytes(), raw) {
					t.Error("bytes")
				}
			}()
			if h := c.Health(); h.PoolUsed != 0 {
				t.Fatalf("pool use %d after a deferred Close", h.PoolUsed)
			}
		})
		drained(t, p)
	})
}

// TestBufferAllocator checks the Alloc methods: alignment of every dtype,
// exhaustion and recovery, and concurrent use.
func TestBufferAllocator(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		cfg := producerConfig(tp, PullAuto)
		cfg.Engine.MemoryMB = 4
		p := open(t, cfg)
		ctx := ctxT(t)
		t.Run("Alignment", func(t *testing.T) {
			var held []*Buffer
			defer func() {
				for _, b := range held {
					b.Release()
				}
			}()
			for i, d := range allDTypes {
				// Odd-sized bytes between tensors must not misalign them.
				odd, err := p.AllocBytes(ctx, int64(2*i+1))
				if err != nil {
					t.Fatal(err)
				}
				b, err := p.AllocTensor(ctx, d, []int64{3, int64(i + 1)})
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, odd, b)
				addr := uintptr(unsafe.Pointer(&b.Bytes()[0]))
				if addr%64 != 0 {
					t.Errorf("%v tensor at %#x: not on a cache line", d, addr)
				}
				x, err := b.Tensor()
				if err != nil || x.DType != d || len(x.Data) != 3*(i+1)*d.Size() {
					t.Fatalf("%v: %+v, %v", d, b.Meta(), err)
				}
				checkView(t, x)
			}
		})
		t.Run("Errors", func(t *testing.T) {
			for name, err := range map[string]error{
				"negative bytes":  errOf(p.AllocBytes(ctx, -1)),
				"bad dtype":       errOf(p.AllocTensor(ctx, 0, []int64{2})),
				"negative dim":    errOf(p.AllocTensor(ctx, F32, []int64{2, -1})),
				"too many dims":   errOf(p.AllocTensor(ctx, U8, make([]int64, MaxDims+1))),
				"larger than all": errOf(p.AllocBytes(ctx, 5<<20)),
			} {
				if err == nil {
					t.Errorf("%s: no error", name)
				}
			}
			if _, err := p.AllocTensor(ctx, F32, []int64{1 << 20, 2}); !errors.Is(err, ErrTooLarge) {
				t.Errorf("an 8 MiB tensor in a 4 MiB pool: %v", err)
			}
			// An empty value takes no memory.
			for _, b := range []*Buffer{must(p.AllocBytes(ctx, 0)), must(p.AllocTensor(ctx, F32, []int64{0, 5}))} {
				if b.Bytes() != nil || b.Size() != 0 || p.Health().PoolUsed != 0 {
					t.Errorf("empty buffer %+v", b.Meta())
				}
				b.Release()
			}
		})
		t.Run("Exhaustion", func(t *testing.T) {
			a, err := p.AllocBytes(ctx, 3<<20)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.AllocBytes(ctx, 2<<20)
			if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "no room") {
				t.Fatalf("alloc beyond the pool: %v", err)
			}
			a.Release()
			b, err := p.AllocBytes(ctx, 2<<20)
			if err != nil {
				t.Fatalf("alloc after release: %v", err)
			}
			b.Release()
		})
		t.Run("Concurrent", func(t *testing.T) {
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for i := range 300 {
						b, err := p.AllocBytes(ctx, int64(1+r.IntN(64<<10)))
						if errors.Is(err, ErrPoolExhausted) {
							continue
						}
						if err != nil {
							t.Error(err)
							return
						}
						mark := byte(w*31 + i)
						fill(b.Bytes(), mark)
						runtime.Gosched()
						// Another goroutine's buffer overlapping this one
						// would change it.
						if !all(b.Bytes(), mark) {
							t.Errorf("worker %d: its buffer changed under it", w)
						}
						b.Release()
					}
				})
			}
			wg.Wait()
		})
		if st := p.Engine().Pool().Stats(); st.InUse != 0 || st.Fragmentation != 0 {
			t.Errorf("pool after the tests: %+v", st)
		}
	})
}

// TestAllocatorInvariants checks what must hold whatever the caller does:
// Release twice is harmless, a released buffer cannot be published, and
// buffers held together never overlap.
func TestAllocatorInvariants(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		p := open(t, Config{Role: RoleBoth, Engine: tp.engine(true, 8)})
		other := open(t, Config{Role: RoleBoth, Engine: tp.engine(true, 8)})
		ctx := ctxT(t)
		pool := func() uint64 { return p.Engine().Pool().Stats().InUse }

		b := must(p.AllocBytes(ctx, 1000))
		for range 3 {
			if err := b.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if pool() != 0 {
			t.Fatal("memory in use after Release")
		}
		// Released twice, then another buffer takes the memory: the
		// repeated Release must not free it.
		b2 := must(p.AllocBytes(ctx, 1000))
		b.Release()
		if pool() == 0 || b2.Bytes() == nil {
			t.Fatal("a repeated Release freed another buffer's memory")
		}
		if _, _, err := p.PutBuffer(ctx, "a", "b", "k", b); !errors.Is(err, ErrReleased) {
			t.Errorf("PutBuffer of a released buffer: %v", err)
		}
		if _, _, err := p.PutBuffer(ctx, "a", "b", "k", b2); err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.PutBuffer(ctx, "a", "b", "k2", b2); !errors.Is(err, ErrReleased) {
			t.Errorf("second PutBuffer of a buffer: %v", err)
		}
		if _, _, err := p.PutBuffer(ctx, "a", "b", "k", nil); err == nil {
			t.Error("PutBuffer of nil")
		}
		ob := must(other.AllocBytes(ctx, 10))
		if _, _, err := p.PutBuffer(ctx, "a", "b", "k", ob); err == nil || !strings.Contains(err.Error(), "not from this connector") {
			t.Errorf("PutBuffer of another connector's buffer: %v", err)
		}
		ob.Release()
		// A PutBuffer with a bad key fails and still takes the buffer.
		bad := must(p.AllocBytes(ctx, 10))
		if _, _, err := p.PutBuffer(ctx, "a/x", "b", "k", bad); err == nil {
			t.Error("PutBuffer under a bad stage name")
		}
		if bad.Bytes() != nil {
			t.Error("a failed PutBuffer left the buffer usable")
		}
		p.Cleanup("a", "b", "k")
		if pool() != 0 {
			t.Fatalf("%d bytes in use", pool())
		}

		// Buffers held together never overlap, until the pool is full.
		r := rand.New(rand.NewPCG(7, 7))
		type span struct{ lo, hi uintptr }
		var held []*Buffer
		var spans []span
		for {
			n := int64(1 + r.IntN(200<<10))
			var b *Buffer
			var err error
			if r.IntN(2) == 0 {
				b, err = p.AllocBytes(ctx, n)
			} else {
				b, err = p.AllocTensor(ctx, I32, []int64{n/4 + 1})
			}
			if errors.Is(err, ErrPoolExhausted) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			lo := uintptr(unsafe.Pointer(&b.Bytes()[0]))
			held = append(held, b)
			spans = append(spans, span{lo, lo + uintptr(b.Size())})
			// Free one in three, to reuse the holes.
			if r.IntN(3) == 0 {
				i := r.IntN(len(held))
				held[i].Release()
				held = slices.Delete(held, i, i+1)
				spans = slices.Delete(spans, i, i+1)
			}
		}
		slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
		for i := 1; i < len(spans); i++ {
			if spans[i].lo < spans[i-1].hi {
				t.Fatalf("buffers overlap: %#x-%#x and %#x-%#x", spans[i-1].lo, spans[i-1].hi, spans[i].lo, spans[i].hi)
			}
		}
		if len(held) < 10 {
			t.Fatalf("only %d buffers fit", len(held))
		}
		for _, b := range held {
			b.Release()
		}
		if st := p.Engine().Pool().Stats(); st.InUse != 0 || st.Fragmentation != 0 {
			t.Errorf("pool %+v", st)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprint("unexpected error: ", err))
	}
	return v
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func all(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

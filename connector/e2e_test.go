package connector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestEndToEnd is the end-to-end test class of vLLM-Omni's Mooncake
// connector guide, on every transport and both pulls: tensors, bytes,
// objects, zero-copy, a large payload, mixed types, concurrency, the three
// kinds of metadata, and gets that wait for a put or give up.
func TestEndToEnd(t *testing.T) {
	eachPull(t, func(t *testing.T, tp tport, pull Pull) {
		t.Run("Tensor", func(t *testing.T) { testTensors(t, tp, pull) })
		t.Run("Bytes", func(t *testing.T) { testBytes(t, tp, pull) })
		t.Run("Object", func(t *testing.T) { testObjects(t, tp, pull) })
		t.Run("ZeroCopy", func(t *testing.T) { testZeroCopy(t, tp, pull) })
		t.Run("Large", func(t *testing.T) { testLarge(t, tp, pull) })
		t.Run("Mixed", func(t *testing.T) { testMixed(t, tp, pull) })
		t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, tp, pull) })
		t.Run("Metadata", func(t *testing.T) { testMetadata(t, tp, pull) })
		t.Run("GetWaitsForPut", func(t *testing.T) { testGetWaits(t, tp, pull) })
		t.Run("GetGivesUp", func(t *testing.T) { testGetGivesUp(t, tp, pull) })
	})
}

var allDTypes = []DType{F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool}

// randomTensor is a tensor of random data (0 or 1 in a BOOL tensor).
func randomTensor(d DType, shape []int64) Tensor {
	n, err := ByteSize(d, shape)
	if err != nil {
		panic(err)
	}
	data := random(int(n))
	if d == Bool {
		for i := range data {
			data[i] &= 1
		}
	}
	return Tensor{DType: d, Shape: shape, Data: data}
}

// checkView views t as its Go element type, which must succeed on what a
// Get received (the pool keeps every buffer aligned), and checks the
// view's length.
func checkView(t *testing.T, x Tensor) {
	t.Helper()
	n, _ := Elements(x.Shape)
	var got int
	var err error
	switch x.DType {
	case F16, BF16, U16:
		var v []uint16
		v, err = View[uint16](x)
		got = len(v)
	case F32:
		var v []float32
		v, err = View[float32](x)
		got = len(v)
	case F64:
		var v []float64
		v, err = View[float64](x)
		got = len(v)
	case I8:
		var v []int8
		v, err = View[int8](x)
		got = len(v)
	case I16:
		var v []int16
		v, err = View[int16](x)
		got = len(v)
	case I32:
		var v []int32
		v, err = View[int32](x)
		got = len(v)
	case I64:
		var v []int64
		v, err = View[int64](x)
		got = len(v)
	case U8:
		var v []uint8
		v, err = View[uint8](x)
		got = len(v)
	case U32:
		var v []uint32
		v, err = View[uint32](x)
		got = len(v)
	case U64:
		var v []uint64
		v, err = View[uint64](x)
		got = len(v)
	case Bool:
		var v []bool
		v, err = View[bool](x)
		got = len(v)
	}
	if err != nil || int64(got) != n {
		t.Fatalf("view of a %v tensor of shape %v: %d elements, %v", x.DType, x.Shape, got, err)
	}
}

func testTensors(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	shapes := [][]int64{{}, {1}, {0}, {3, 5}, {2, 0, 3}, {4, 1, 1, 7}}
	for _, d := range allDTypes {
		for _, shape := range shapes {
			want := randomTensor(d, shape)
			key := fmt.Sprintf("%v%v", d, shape)
			size, m, err := p.Put(ctx, "a", "b", key, want)
			if err != nil || size != int64(len(want.Data)) {
				t.Fatalf("put %s: %d, %v", key, size, err)
			}
			b, n, err := c.Get(ctx, "a", "b", key, &m)
			if err != nil || n != size {
				t.Fatalf("get %s: %d, %v", key, n, err)
			}
			got, err := b.Tensor()
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if got.DType != d || !reflect.DeepEqual(got.Shape, shape) && len(shape) > 0 || len(got.Shape) != len(shape) || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("%s: got %v %v (%d bytes)", key, got.DType, got.Shape, len(got.Data))
			}
			checkView(t, got)
			b.Release()
		}
	}
	drained(t, p)
}

func testBytes(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	for _, n := range []int{0, 1, 63, 4095, 1<<20 + 3, 3<<20 + 5} {
		v := random(n)
		size, m, err := p.Put(ctx, "a", "b", "k", v)
		if err != nil || size != int64(n) {
			t.Fatalf("put %d: %d, %v", n, size, err)
		}
		getBytes(t, ctx, c, "k", &m, v)
	}
	// A nil slice is empty bytes.
	if _, _, err := p.Put(ctx, "a", "b", "nil", []byte(nil)); err != nil {
		t.Fatal(err)
	}
	getBytes(t, ctx, c, "nil", nil, nil)
	drained(t, p)
}

type point struct {
	X, Y float64
	Tag  string
}

type scene struct {
	Name   string
	Points []point
	Attrs  map[string][]int
	Next   *scene
}

func testObjects(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	nested := scene{
		Name:   "outer",
		Points: []point{{1, 2, "a"}, {3.5, -4, "b"}},
		Attrs:  map[string][]int{"x": {1, 2}, "y": nil},
		Next:   &scene{Name: "inner", Attrs: map[string][]int{}},
	}
	for _, tc := range []struct {
		name string
		v    any
		into func() any // a pointer to decode into
	}{
		{"struct", point{1, 2, "p"}, func() any { return new(point) }},
		{"map", map[string]int{"a": 1, "b": 2}, func() any { return new(map[string]int) }},
		{"nested", nested, func() any { return new(scene) }},
		{"string", "just a string", func() any { return new(string) }},
		{"slice", []float64{1, 2.5, -3}, func() any { return new([]float64) }},
	} {
		if _, _, err := p.Put(ctx, "a", "b", tc.name, tc.v); err != nil {
			t.Fatalf("put %s: %v", tc.name, err)
		}
		b, _, err := c.Get(ctx, "a", "b", tc.name, nil)
		if err != nil {
			t.Fatalf("get %s: %v", tc.name, err)
		}
		if b.Meta().Kind != KindObject {
			t.Fatalf("%s: kind %v", tc.name, b.Meta().Kind)
		}
		got := tc.into()
		if err := b.Decode(got); err != nil {
			t.Fatalf("decode %s: %v", tc.name, err)
		}
		if v := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(v, tc.v) {
			t.Errorf("%s: got %#v, want %#v", tc.name, v, tc.v)
		}
		// Decoding into the wrong type is an error, not a panic or garbage.
		var wrong int
		if err := b.Decode(&wrong); !errors.Is(err, ErrObject) {
			t.Errorf("%s decoded into an int: %v", tc.name, err)
		}
		if err := b.Decode(wrong); err == nil {
			t.Errorf("%s decoded into a non-pointer", tc.name)
		}
		if _, err := b.Tensor(); err == nil {
			t.Errorf("%s: an object viewed as a tensor", tc.name)
		}
		b.Release()
	}
	// A value the codec cannot encode fails the Put, with nothing stored.
	if _, _, err := p.Put(ctx, "a", "b", "chan", make(chan int)); err == nil {
		t.Fatal("put of a channel succeeded")
	}
	drained(t, p)
}

func testZeroCopy(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	used := func() int64 { return p.Health().PoolUsed }

	// A tensor filled in place through a typed view.
	b, err := p.AllocTensor(ctx, F32, []int64{256, 256})
	if err != nil {
		t.Fatal(err)
	}
	if used() < 256*256*4 {
		t.Fatalf("pool use %d after AllocTensor", used())
	}
	x, err := b.Tensor()
	if err != nil {
		t.Fatal(err)
	}
	v, err := View[float32](x)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		v[i] = float32(i) * 0.5
	}
	want := bytes.Clone(x.Data)
	size, m, err := p.PutBuffer(ctx, "a", "b", "t", b)
	if err != nil || size != 256*256*4 || m.Kind != KindTensor || m.DType != F32 || !reflect.DeepEqual(m.Shape, []int64{256, 256}) {
		t.Fatalf("PutBuffer: %d, %+v, %v", size, m, err)
	}
	// PutBuffer took the buffer over: it is released.
	if b.Bytes() != nil {
		t.Error("the buffer still has bytes after PutBuffer")
	}
	if _, err := b.Tensor(); !errors.Is(err, ErrReleased) {
		t.Errorf("Tensor after PutBuffer: %v", err)
	}
	if err := b.Release(); err != nil {
		t.Errorf("Release after PutBuffer: %v", err)
	}
	got, _, err := c.Get(ctx, "a", "b", "t", &m)
	if err != nil {
		t.Fatal(err)
	}
	gx, _ := got.Tensor()
	gv, err := View[float32](gx)
	if err != nil || !bytes.Equal(gx.Data, want) || gv[3] != 1.5 {
		t.Fatalf("zero-copy tensor: %v", err)
	}
	got.Release()

	// Bytes filled in place, published through Put too.
	bb, err := p.AllocBytes(ctx, 100_003)
	if err != nil {
		t.Fatal(err)
	}
	copy(bb.Bytes(), random(100_003))
	wantB := bytes.Clone(bb.Bytes())
	if _, _, err := p.Put(ctx, "a", "b", "b", bb); err != nil {
		t.Fatal(err)
	}
	getBytes(t, ctx, c, "b", nil, wantB)
	drained(t, p)

	// An unpublished buffer's Release hands its memory back.
	ub, err := p.AllocBytes(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if used() < 1<<20 {
		t.Fatalf("pool use %d", used())
	}
	if err := ub.Release(); err != nil || used() != 0 {
		t.Fatalf("release: %v, pool use %d", err, used())
	}
}

// testLarge moves a 100 MB value (and a 5 MiB one in the VM, where
// SoftRoCE under emulation moves 40-70 MB/s).
func testLarge(t *testing.T, tp tport, pull Pull) {
	n := tp.size(100<<20, 5<<20)
	p, c := pair(t, tp, pull, func(p, c *Config) { p.Engine.MemoryMB, c.Engine.MemoryMB = 128, 128 })
	ctx := ctxT(t)
	v := make([]byte, n)
	for i := 0; i < n; i += 4096 {
		copy(v[i:], random(64))
	}
	size, m, err := p.Put(ctx, "a", "b", "large", v)
	if err != nil || size != int64(n) {
		t.Fatal(size, err)
	}
	getBytes(t, ctx, c, "large", &m, v)
	drained(t, p)
}

func testMixed(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	tensor := randomTensor(BF16, []int64{8, 16})
	raw := random(12345)
	obj := map[string]any{"step": uint64(7), "done": true}
	vals := []any{tensor, raw, obj, randomTensor(I64, nil), []byte{}}
	for i, v := range vals {
		if _, _, err := p.Put(ctx, "a", "b", fmt.Sprint("k", i), v); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(vals) - 1; i >= 0; i-- {
		b, _, err := c.Get(ctx, "a", "b", fmt.Sprint("k", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		switch v := vals[i].(type) {
		case Tensor:
			got, err := b.Tensor()
			if err != nil || got.DType != v.DType || len(got.Shape) != len(v.Shape) || !bytes.Equal(got.Data, v.Data) {
				t.Errorf("k%d: %+v, %v", i, got.Shape, err)
			}
		case []byte:
			if b.Meta().Kind != KindBytes || !bytes.Equal(b.Bytes(), v) {
				t.Errorf("k%d: kind %v", i, b.Meta().Kind)
			}
		default:
			var got map[string]any
			if err := b.Decode(&got); err != nil || !reflect.DeepEqual(got, obj) {
				t.Errorf("k%d: %#v, %v", i, got, err)
			}
		}
		b.Release()
	}
	drained(t, p)
}

func testConcurrent(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	const workers, each = 8, 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				v := random((w*each + i) * 1031 % (256 << 10))
				if _, _, err := p.Put(ctx, "a", "b", key, v); err != nil {
					t.Error(err)
					return
				}
				// Gets alternate between full, partial and no metadata.
				var m *Meta
				if i%2 == 0 {
					m = &Meta{Producer: p.Addr()}
				}
				b, _, err := c.Get(ctx, "a", "b", key, m)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(b.Bytes(), v) && len(v) > 0 {
					t.Errorf("%s: wrong data", key)
				}
				b.Release()
			}
		})
	}
	wg.Wait()
	drained(t, p)
	if h := c.Health(); h.Gets != workers*each || h.PoolUsed != 0 {
		t.Errorf("consumer health %+v", h)
	}
}

func testMetadata(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	x := randomTensor(F16, []int64{3, 4})
	var full Meta
	for name, m := range map[string]*Meta{"full": &full, "partial": {Producer: p.Addr()}, "none": nil} {
		_, put, err := p.Put(ctx, "a", "b", "k", x)
		if err != nil {
			t.Fatal(err)
		}
		full = put
		b, _, err := c.Get(ctx, "a", "b", "k", m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := b.Meta()
		if got.Key != full.Key || got.Kind != KindTensor || got.DType != F16 || !reflect.DeepEqual(got.Shape, full.Shape) || got.Size != 24 {
			t.Errorf("%s metadata: the buffer says %+v, want %+v", name, got, full)
		}
		gx, err := b.Tensor()
		if err != nil || !bytes.Equal(gx.Data, x.Data) {
			t.Errorf("%s: %v", name, err)
		}
		b.Release()
	}
	drained(t, p)
}

func testGetWaits(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	v := random(2<<20 + 1)
	done := make(chan error, 1)
	go func() {
		b, _, err := c.Get(ctx, "a", "b", "later", nil)
		if err == nil {
			if !bytes.Equal(b.Bytes(), v) {
				err = errors.New("wrong data")
			}
			b.Release()
		}
		done <- err
	}()
	eventually(t, "waiting", func() bool { return p.Health().Waiting == 1 })
	if _, _, err := p.Put(ctx, "a", "b", "later", v); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	drained(t, p)
	if h := p.Health(); h.Waiting != 0 {
		t.Errorf("health %+v", h)
	}
}

func testGetGivesUp(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	// Connect first: the short ctx is for the wait, not for the dial
	// (which takes longer than that on rdma in the VM).
	if _, _, err := c.Get(ctxT(t), "a", "b", "never", nil, NoWait()); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	_, _, err := c.Get(ctx, "a", "b", "never", nil)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get whose ctx ended: %v, want ErrNotFound and DeadlineExceeded", err)
	}
	// The producer drops the waiter.
	eventually(t, "no waiter", func() bool { return p.Health().Waiting == 0 })
	if h := c.Health(); h.Timeouts != 1 || h.Errors != 2 {
		t.Errorf("consumer health %+v", h)
	}
	// A later Put of the key is not sent to the consumer that gave up:
	// the value stays for the next one.
	v := random(1000)
	if _, _, err := p.Put(ctxT(t), "a", "b", "never", v); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); h.Slots != 1 {
		t.Fatalf("health %+v", h)
	}
	getBytes(t, ctxT(t), c, "never", nil, v)
	drained(t, p)
}

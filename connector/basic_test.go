package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestBasicConnector is the first test class of vLLM-Omni's Mooncake
// connector guide: init, put of a tensor, bytes and an object, cleanup, and
// pool exhaustion.
func TestBasicConnector(t *testing.T) {
	t.Run("ConfigErrors", func(t *testing.T) {
		ctx := context.Background()
		for name, tc := range map[string]struct {
			cfg  Config
			want string
		}{
			"producer without listen": {Config{Role: RoleProducer}, "a producer must listen"},
			"both without listen":     {Config{Role: RoleBoth}, "a both must listen"},
			"bad role":                {Config{Role: 7}, "role 7"},
			"bad pull":                {Config{Role: RoleConsumer, Pull: 9}, "pull 9"},
			"negative chunk size":     {Config{Role: RoleConsumer, ChunkSize: -1}, "chunk size -1"},
			"small max message":       {Config{Role: RoleConsumer, Engine: xfer.Config{MaxMessage: 1024}}, "max_message 1024"},
		} {
			c, err := Open(ctx, tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("%s: Open succeeded", name)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want it to say %q", name, err, tc.want)
			}
		}
		if _, err := ParseRole("middle"); err == nil || !strings.Contains(err.Error(), "producer, consumer or both") {
			t.Errorf("ParseRole: %v", err)
		}
		if _, err := ParsePull("push"); err == nil || !strings.Contains(err.Error(), "auto, read or write") {
			t.Errorf("ParsePull: %v", err)
		}
	})
	eachTransport(t, func(t *testing.T, tp tport) {
		t.Run("Init", func(t *testing.T) {
			for _, role := range []Role{RoleProducer, RoleConsumer, RoleBoth} {
				cfg := Config{Role: role, Engine: tp.engine(role != RoleConsumer, 8)}
				c := open(t, cfg)
				h := c.Health()
				if c.Role() != role || h.Role != role.String() || h.Closed || h.PoolSize < 8<<20-4096 || h.PoolUsed != 0 {
					t.Errorf("%v: role %v, health %+v", role, c.Role(), h)
				}
				if (c.Addr() != "") != (role != RoleConsumer) {
					t.Errorf("%v: addr %q", role, c.Addr())
				}
				if c.Pull() != PullWrite {
					t.Errorf("%v: pull %v, want auto to resolve to write", role, c.Pull())
				}
				if err := c.Close(); err != nil {
					t.Errorf("%v: close: %v", role, err)
				}
			}
		})
		for _, pull := range pulls {
			t.Run("Put/"+pull.String(), func(t *testing.T) { testBasicPut(t, tp, pull) })
		}
		t.Run("Cleanup", func(t *testing.T) { testBasicCleanup(t, tp) })
		t.Run("PoolExhaustion", func(t *testing.T) { testPoolExhaustion(t, tp) })
	})
}

func testBasicPut(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	tensor := Tensor{DType: F32, Shape: []int64{2, 3}, Data: random(24)}
	type obj struct {
		Name string
		N    []int
	}
	for _, tc := range []struct {
		name string
		v    any
		want Meta
	}{
		{"tensor", tensor, Meta{Size: 24, Kind: KindTensor, DType: F32, Shape: []int64{2, 3}}},
		{"bytes", []byte("hello, consumer"), Meta{Size: 15, Kind: KindBytes}},
		{"object", obj{"x", []int{1, 2, 3}}, Meta{Kind: KindObject}},
	} {
		size, m, err := p.Put(ctx, "stage0", "stage1", tc.name, tc.v)
		if err != nil {
			t.Fatalf("put %s: %v", tc.name, err)
		}
		want := tc.want
		want.Producer, want.Key = p.Addr(), "stage0/stage1/"+tc.name
		if want.Kind == KindObject {
			enc, _ := EncodeObject(tc.v)
			want.Size = int64(len(enc))
		}
		if size != want.Size || !reflect.DeepEqual(m, want) {
			t.Fatalf("put %s: size %d, meta %+v; want %+v", tc.name, size, m, want)
		}
		// The metadata travels through an orchestrator as JSON or binary.
		js, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var mj Meta
		if err := json.Unmarshal(js, &mj); err != nil || !reflect.DeepEqual(mj, m) {
			t.Fatalf("%s: JSON %s round-trips to %+v, %v", tc.name, js, mj, err)
		}
		bin, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var mb Meta
		if err := mb.UnmarshalBinary(bin); err != nil || !reflect.DeepEqual(mb, m) {
			t.Fatalf("%s: binary round-trips to %+v, %v", tc.name, mb, err)
		}
		b, n, err := c.Get(ctx, "stage0", "stage1", tc.name, &mb)
		if err != nil || n != size {
			t.Fatalf("get %s: %d bytes, %v", tc.name, n, err)
		}
		if got := b.Meta(); got.Kind != m.Kind || got.Size != m.Size || got.DType != m.DType || !reflect.DeepEqual(got.Shape, m.Shape) {
			t.Errorf("get %s: meta %+v, want %+v", tc.name, got, m)
		}
		switch tc.name {
		case "tensor":
			got, err := b.Tensor()
			if err != nil || !reflect.DeepEqual(got, tensor) {
				t.Errorf("tensor: %+v, %v", got, err)
			}
		case "bytes":
			if string(b.Bytes()) != "hello, consumer" {
				t.Errorf("bytes: %q", b.Bytes())
			}
		case "object":
			var got obj
			if err := b.Decode(&got); err != nil || !reflect.DeepEqual(got, tc.v) {
				t.Errorf("object: %+v, %v", got, err)
			}
		}
		b.Release()
	}
	drained(t, p)
	h := p.Health()
	if h.Puts != 3 || h.Served != 3 || h.Errors != 0 {
		t.Errorf("producer health %+v", h)
	}
	if h := c.Health(); h.Gets != 3 || h.BytesGot == 0 || h.Errors != 0 || h.PoolUsed != 0 {
		t.Errorf("consumer health %+v", h)
	}
}

func testBasicCleanup(t *testing.T, tp tport) {
	p, c := pair(t, tp, PullAuto, nil)
	ctx := ctxT(t)
	if _, _, err := p.Put(ctx, "a", "b", "k", random(1<<20)); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); h.Slots != 1 || h.PoolUsed < 1<<20 {
		t.Fatalf("after put: %+v", h)
	}
	if ok, err := p.Cleanup("a", "b", "k"); !ok || err != nil {
		t.Fatalf("cleanup: %v, %v", ok, err)
	}
	if ok, err := p.Cleanup("a", "b", "k"); ok || err != nil {
		t.Fatalf("second cleanup: %v, %v; want false, nil", ok, err)
	}
	if ok, err := p.Cleanup("a", "b", "never"); ok || err != nil {
		t.Fatalf("cleanup of a key never put: %v, %v", ok, err)
	}
	if h := p.Health(); h.Slots != 0 || h.PoolUsed != 0 {
		t.Fatalf("after cleanup: %+v", h)
	}
	if _, _, err := c.Get(ctx, "a", "b", "k", nil, NoWait()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a cleaned key: %v, want ErrNotFound", err)
	}
}

func testPoolExhaustion(t *testing.T, tp tport) {
	ctx := ctxT(t)
	small := func(wait bool) func(p, c *Config) {
		return func(p, c *Config) { p.Engine.MemoryMB, p.WaitForMemory = 4, wait }
	}
	t.Run("Fail", func(t *testing.T) {
		p, c := pair(t, tp, PullAuto, small(false))
		v3 := random(3 << 20)
		if _, _, err := p.Put(ctx, "a", "b", "k3", v3); err != nil {
			t.Fatal(err)
		}
		v2 := random(2 << 20)
		_, _, err := p.Put(ctx, "a", "b", "k2", v2)
		if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "no room for 2097152 bytes") || !strings.Contains(err.Error(), "WaitForMemory") {
			t.Fatalf("put beyond the pool: %v", err)
		}
		_, _, err = p.Put(ctx, "a", "b", "huge", make([]byte, 5<<20))
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "larger than the whole pool") {
			t.Fatalf("put larger than the pool: %v", err)
		}
		// A Get frees the slot; then the Put fits.
		getBytes(t, ctx, c, "k3", nil, v3)
		drained(t, p)
		if _, _, err := p.Put(ctx, "a", "b", "k2", v2); err != nil {
			t.Fatalf("put after the get freed room: %v", err)
		}
		// So does a Cleanup.
		if _, _, err := p.Put(ctx, "a", "b", "k3", v3); !errors.Is(err, ErrPoolExhausted) {
			t.Fatalf("put beyond the pool: %v", err)
		}
		p.Cleanup("a", "b", "k2")
		if _, _, err := p.Put(ctx, "a", "b", "k3", v3); err != nil {
			t.Fatalf("put after cleanup: %v", err)
		}
		if h := p.Health(); h.Errors != 3 || h.Puts != 3 {
			t.Errorf("health %+v: want 3 puts and 3 errors", h)
		}
	})
	t.Run("Wait", func(t *testing.T) {
		p, _ := pair(t, tp, PullAuto, small(true))
		if _, _, err := p.Put(ctx, "a", "b", "k3", random(3<<20)); err != nil {
			t.Fatal(err)
		}
		// A Put whose ctx ends while the pool is full fails.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _, err := p.Put(short, "a", "b", "k2", random(2<<20))
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrPoolExhausted) {
			t.Fatalf("put whose ctx ended: %v", err)
		}
		// A Put waits until a Cleanup makes room.
		done := make(chan error, 1)
		go func() {
			_, _, err := p.Put(ctx, "a", "b", "k2", random(2<<20))
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("put into a full pool returned at once: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		p.Cleanup("a", "b", "k3")
		if err := <-done; err != nil {
			t.Fatalf("waiting put: %v", err)
		}
		if h := p.Health(); h.Slots != 1 {
			t.Fatalf("health %+v", h)
		}
	})
}

// TestDefaultChunkWrite: with ChunkSize left at its default, a producer
// WRITEs a value of several MiB in one piece (WriteChunkSize) on every
// transport, which the transport slices itself (tcp over its bulk
// connections), then its tail with the notification; the consumer gets
// every byte.
func TestDefaultChunkWrite(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		p, c := pair(t, tp, PullWrite, func(p, c *Config) { p.ChunkSize, c.ChunkSize = 0, 0 })
		ctx := ctxT(t)
		v := random(tp.size(24<<20, 3<<20))
		_, m, err := p.Put(ctx, "a", "b", "big", v)
		if err != nil {
			t.Fatal(err)
		}
		b, n, err := c.Get(ctx, "a", "b", "big", &m)
		if err != nil || n != int64(len(v)) {
			t.Fatalf("get: %d bytes, %v", n, err)
		}
		defer b.Release()
		if !bytes.Equal(b.Bytes(), v) {
			t.Fatal("the value differs from what was put")
		}
	})
}

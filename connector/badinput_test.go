package connector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestBadInput checks that what the caller or another engine gets wrong
// ends in a clear error: unknown keys, oversized values, the wrong role,
// bad names and metadata, malformed control messages, and a producer that
// is not there.
func TestBadInput(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp tport) {
		for _, pull := range pulls {
			t.Run("UnknownKey/"+pull.String(), func(t *testing.T) {
				p, c := pair(t, tp, pull, nil)
				_, _, err := c.Get(ctxT(t), "a", "b", "nope", nil, NoWait())
				if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"a/b/nope"`) || !strings.Contains(err.Error(), p.Addr()) {
					t.Fatalf("get of an unknown key: %v", err)
				}
			})
			t.Run("Oversized/"+pull.String(), func(t *testing.T) { testOversized(t, tp, pull) })
			t.Run("WrongMetadata/"+pull.String(), func(t *testing.T) { testWrongMeta(t, tp, pull) })
		}
		t.Run("Role", func(t *testing.T) {
			p, c := pair(t, tp, PullAuto, nil)
			ctx := ctxT(t)
			for name, err := range map[string]error{
				"get on a producer":          second(p.Get(ctx, "a", "b", "k", nil)),
				"put on a consumer":          second(c.Put(ctx, "a", "b", "k", []byte("v"))),
				"alloc on a consumer":        errOf(c.AllocBytes(ctx, 10)),
				"alloc tensor on a consumer": errOf(c.AllocTensor(ctx, F32, []int64{2})),
			} {
				if !errors.Is(err, ErrRole) {
					t.Errorf("%s: %v, want ErrRole", name, err)
				}
			}
			// A Get aimed at a consumer (which holds nothing) is refused.
			both := open(t, Config{Role: RoleBoth, Engine: tp.engine(true, 8)})
			short, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if _, _, err := both.Get(short, "a", "b", "k", &Meta{Producer: mustListen(t, tp)}, NoWait()); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "consumer") {
				t.Errorf("get from a consumer: %v", err)
			}
		})
		t.Run("Names", func(t *testing.T) {
			p, c := pair(t, tp, PullAuto, nil)
			ctx := ctxT(t)
			for _, n := range [][3]string{{"a/x", "b", "k"}, {"a", "b/x", "k"}, {"a", "b", ""}, {"a", "b", strings.Repeat("k", MaxKeyLen)}} {
				_, _, err := p.Put(ctx, n[0], n[1], n[2], []byte("v"))
				if err == nil || !strings.Contains(err.Error(), "stage") && !strings.Contains(err.Error(), "key") {
					t.Errorf("put %q: %v", n, err)
				}
				if _, _, err := c.Get(ctx, n[0], n[1], n[2], nil, NoWait()); err == nil || errors.Is(err, ErrNotFound) {
					t.Errorf("get %q: %v", n, err)
				}
				if _, err := p.Cleanup(n[0], n[1], n[2]); err == nil {
					t.Errorf("cleanup %q succeeded", n)
				}
			}
			// A '/' in the key itself is fine: the stages come first.
			if _, _, err := p.Put(ctx, "a", "b", "k/with/slashes", []byte("v")); err != nil {
				t.Fatal(err)
			}
			getBytes(t, ctx, c, "k/with/slashes", nil, []byte("v"))
			drained(t, p)
		})
		t.Run("MalformedControl", func(t *testing.T) { testMalformedControl(t, tp) })
		t.Run("NoProducer", func(t *testing.T) {
			c := open(t, consumerConfig(tp, PullAuto))
			ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
			defer cancel()
			_, _, err := c.Get(ctx, "a", "b", "k", &Meta{Producer: deadAddr(t)})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("get from an address where nothing listens: %v (ctx %v)", err, ctx.Err())
			}
			t.Log(err)
		})
	})
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// mustListen is the address of a consumer-only connector that listens.
func mustListen(t *testing.T, tp tport) string {
	cfg := Config{Role: RoleConsumer, Engine: tp.engine(true, 8)}
	return open(t, cfg).Addr()
}

func testOversized(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, func(p, c *Config) { p.Engine.MemoryMB, c.Engine.MemoryMB = 16, 4 })
	ctx := ctxT(t)
	if _, _, err := p.Put(ctx, "a", "b", "k", make([]byte, 17<<20)); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "MemoryMB") {
		t.Fatalf("put larger than the pool: %v", err)
	}
	if _, err := p.AllocBytes(ctx, 17<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("alloc larger than the pool: %v", err)
	}
	// A value that fits the producer's pool but not the consumer's.
	v := random(6 << 20)
	_, m, err := p.Put(ctx, "a", "b", "k", v)
	if err != nil {
		t.Fatal(err)
	}
	for _, meta := range []*Meta{&m, nil} {
		if _, _, err := c.Get(ctx, "a", "b", "k", meta); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("get of a value larger than the consumer's pool: %v", err)
		}
	}
	// The failed gets took nothing: the value is still there for another.
	eventually(t, "no claims", func() bool { h := p.Health(); return h.Slots == 1 && h.Served == 0 })
	c2 := open(t, consumerConfig(tp, pull))
	getBytes(t, ctx, c2, "k", &m, v)
	drained(t, p)
	if h := c.Health(); h.PoolUsed != 0 || h.Errors != 2 {
		t.Errorf("consumer health %+v", h)
	}
}

func testWrongMeta(t *testing.T, tp tport, pull Pull) {
	p, c := pair(t, tp, pull, nil)
	ctx := ctxT(t)
	v := random(1000)
	_, m, err := p.Put(ctx, "a", "b", "k", v)
	if err != nil {
		t.Fatal(err)
	}
	other := m
	other.Key = "a/b/other"
	if _, _, err := c.Get(ctx, "a", "b", "k", &other); err == nil || !strings.Contains(err.Error(), `the metadata is for "a/b/other"`) {
		t.Errorf("get with another key's metadata: %v", err)
	}
	bad := Meta{Producer: p.Addr(), Kind: KindTensor, DType: F32, Shape: []int64{2, 2}, Size: 1000}
	if _, _, err := c.Get(ctx, "a", "b", "k", &bad); err == nil || !errors.Is(err, ErrMeta) && !errors.Is(err, ErrShape) {
		t.Errorf("get with inconsistent tensor metadata: %v", err)
	}
	unknown := Meta{Producer: p.Addr(), Kind: 9, Size: 1000}
	if _, _, err := c.Get(ctx, "a", "b", "k", &unknown); err == nil {
		t.Error("get with an unknown kind succeeded")
	}
	// Consistent metadata that is wrong about the value: the value as the
	// producer stored it comes back, described as it is.
	for _, size := range []int64{10, 5000} {
		wrong := Meta{Producer: p.Addr(), Kind: KindBytes, Size: size}
		b, n, err := c.Get(ctx, "a", "b", "k", &wrong, NoWait())
		if err != nil {
			t.Fatalf("get with metadata of size %d: %v", size, err)
		}
		if n != 1000 || b.Size() != 1000 || !bytes.Equal(b.Bytes(), v) {
			t.Errorf("get with metadata of size %d: %d bytes (buffer %d)", size, n, b.Size())
		}
		b.Release()
		if _, _, err := p.Put(ctx, "a", "b", "k", v); err != nil {
			t.Fatal(err)
		}
	}
}

// testMalformedControl dials the producer with a plain engine and sends it
// garbage: it answers what it can, logs the rest, and keeps serving.
func testMalformedControl(t *testing.T, tp tport) {
	var logs logBuf
	p, c := pair(t, tp, PullAuto, func(p, c *Config) { p.Logger = logs.logger() })
	ctx := ctxT(t)
	_, peer, buf := rawPeer(t, ctx, tp.engine(false, 1), p.Addr())
	send := func(msg []byte) {
		t.Helper()
		if err := peer.Send(ctx, append(buf[:0], msg...)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() reply {
		t.Helper()
		in := make([]byte, 64<<10)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		n, err := peer.Recv(rctx, in)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := parseReply(in[:n])
		if err != nil {
			t.Fatalf("the producer's answer: %v", err)
		}
		return rep
	}
	id := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

	// Garbage, a message too short to carry an id, unknown releases and
	// cancels, an answer the producer never asked for: logged or ignored.
	send([]byte{0xff, 1, 2, 3})
	send([]byte{msgGet, 1})
	send(append([]byte{msgRelease}, append(id(77), 1)...))
	send(append([]byte{msgCancel}, id(78)...))
	send(append([]byte{msgInfo}, append(id(79), statusOK)...))
	// A truncated get whose id parses: the producer refuses it by id.
	trunc := append(append([]byte{msgGet}, id(42)...), 0, 100, 0, 'k')
	send(trunc)
	if rep := recv(); rep.id != 42 || rep.status != statusRefused || rep.msg == "" {
		t.Fatalf("answer to a truncated get: %+v", rep)
	}
	// A get with a destination outside any memory the producer may write:
	// the write fails and the producer says so; the value stays.
	v := random(5000)
	if _, _, err := p.Put(ctx, "a", "b", "k", v); err != nil {
		t.Fatal(err)
	}
	get := appendGet(nil, 43, flagDest, "a/b/k", xfer.RemoteAddr{Region: 999, Addr: 1 << 40, Key: 1}, 5000)
	send(get)
	if rep := recv(); rep.id != 43 || rep.status != statusFailed {
		t.Fatalf("answer to a get with a bad destination: %+v", rep)
	}
	// A valid get, and the same id again while it is claimed.
	send(appendGet(nil, 44, 0, "a/b/k", xfer.RemoteAddr{}, 0))
	if rep := recv(); rep.id != 44 || rep.status != statusOK || rep.meta.Size != 5000 {
		t.Fatalf("answer to a get: %+v", rep)
	}
	send(appendGet(nil, 44, 0, "a/b/k", xfer.RemoteAddr{}, 0))
	if rep := recv(); rep.id != 44 || rep.status != statusRefused || !strings.Contains(rep.msg, "already in progress") {
		t.Fatalf("answer to a repeated get: %+v", rep)
	}
	// Releasing without taking leaves the value for a real consumer.
	send(appendRelease(nil, 44, false))

	getBytes(t, ctx, c, "k", nil, v)
	drained(t, p)
	eventually(t, "logged", func() bool {
		l := logs.String()
		return strings.Contains(l, "malformed request") && strings.Contains(l, "did not ask")
	})
	if h := p.Health(); h.Served != 1 {
		t.Errorf("producer health %+v", h)
	}
}

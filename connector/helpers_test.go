package connector

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// tport is a transport the tests run on: tcp and shm on the host, rdma in
// the VM (on the device testutil.RequireVerbs names).
type tport struct {
	policy xfer.Policy
	device string // the RDMA device; "" picks the first
}

func (tp tport) String() string { return string(tp.policy) }

// rdma reports whether tp runs over verbs, where SoftRoCE under emulation
// moves 40-70 MB/s: payloads there are kept small.
func (tp tport) rdma() bool { return tp.policy == xfer.PolicyRDMA }

// size is n on the host, and small on rdma in the VM.
func (tp tport) size(n, vm int) int {
	if tp.rdma() {
		return vm
	}
	return n
}

// engine is an engine config on tp with a pool of mb MiB, listening on
// loopback when listen is set.
func (tp tport) engine(listen bool, mb int) xfer.Config {
	cfg := xfer.Config{Transport: tp.policy, MemoryMB: mb}
	cfg.RDMA.Device = tp.device
	if listen {
		cfg.Listen = "127.0.0.1:0"
	}
	return cfg
}

// transports are the transports of this run: rdma inside the VM (RDMA_VM
// set), else tcp and shm.
func transports(t *testing.T) []tport {
	t.Helper()
	if os.Getenv("RDMA_VM") != "" {
		return []tport{{policy: xfer.PolicyRDMA, device: testutil.RequireVerbs(t)}}
	}
	return []tport{{policy: xfer.PolicyTCP}, {policy: xfer.PolicySHM}}
}

// pulls are both ways a Get moves a value.
var pulls = []Pull{PullRead, PullWrite}

// eachTransport runs f as a subtest on every transport of this run.
func eachTransport(t *testing.T, f func(t *testing.T, tp tport)) {
	t.Helper()
	for _, tp := range transports(t) {
		t.Run(tp.String(), func(t *testing.T) { f(t, tp) })
	}
}

// eachPull runs f as a subtest on every transport and pull.
func eachPull(t *testing.T, f func(t *testing.T, tp tport, pull Pull)) {
	t.Helper()
	eachTransport(t, func(t *testing.T, tp tport) {
		for _, pull := range pulls {
			t.Run(pull.String(), func(t *testing.T) { f(t, tp, pull) })
		}
	})
}

// open opens a connector that the test's cleanup closes.
func open(t testing.TB, cfg Config) *Connector {
	t.Helper()
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// producerConfig and consumerConfig are the configs pair starts from: 64
// MiB pools, 1 MiB chunks (so that a few MB already go in several pieces).
func producerConfig(tp tport, pull Pull) Config {
	return Config{Role: RoleProducer, Pull: pull, ChunkSize: 1 << 20, Engine: tp.engine(true, 64)}
}

func consumerConfig(tp tport, pull Pull) Config {
	return Config{Role: RoleConsumer, Pull: pull, ChunkSize: 1 << 20, Engine: tp.engine(false, 64)}
}

// pair opens a producer and a consumer on tp, pulling by pull; mod may
// change their configs first. The consumer's Config.Producer is the
// producer.
func pair(t testing.TB, tp tport, pull Pull, mod func(p, c *Config)) (*Connector, *Connector) {
	t.Helper()
	pc, cc := producerConfig(tp, pull), consumerConfig(tp, pull)
	if mod != nil {
		mod(&pc, &cc)
	}
	p := open(t, pc)
	cc.Producer = p.Addr()
	return p, open(t, cc)
}

// ctxT is a context that ends with the test, or after a minute.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// random returns n random bytes.
func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// eventually polls cond until it holds, failing the test after a generous
// bound. It asserts that something happens, never how fast.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drained waits until producer p holds no value and no pool memory.
func drained(t testing.TB, p *Connector) {
	t.Helper()
	eventually(t, "drained", func() bool { h := p.Health(); return h.Slots == 0 && h.PoolUsed == 0 })
}

// getBytes gets key from c and checks that it is want, then releases it.
func getBytes(t testing.TB, ctx context.Context, c *Connector, key string, m *Meta, want []byte, opts ...GetOption) {
	t.Helper()
	b, n, err := c.Get(ctx, "a", "b", key, m, opts...)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	defer b.Release()
	if n != int64(len(want)) || b.Size() != n {
		t.Fatalf("get %q: %d bytes (buffer says %d), want %d", key, n, b.Size(), len(want))
	}
	if !bytes.Equal(b.Bytes(), want) && len(want) > 0 {
		t.Fatalf("get %q: wrong data", key)
	}
}

// logBuf collects a connector's logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// rawPeer opens a plain engine with cfg and dials addr with it: a peer
// that speaks the control protocol by hand. It returns the engine (closed
// when the test ends; closing it earlier is a peer that dies), the peer,
// and maxControl bytes of registered memory to send from.
func rawPeer(t *testing.T, ctx context.Context, cfg xfer.Config, addr string) (*xfer.Engine, *xfer.Peer, []byte) {
	t.Helper()
	eng, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	peer, err := eng.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := eng.Alloc(maxControl)
	if err != nil {
		t.Fatal(err)
	}
	return eng, peer, buf.Bytes()
}

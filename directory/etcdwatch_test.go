package directory

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// cutProxy forwards loopback TCP connections to an address until cut:
// then it closes every connection it carries and holds the new ones,
// unanswered, until restore. It cuts a client off its etcd for real, as a
// broken network does, while the etcd runs on for the others.
type cutProxy struct {
	ln net.Listener
	to string
	wg sync.WaitGroup

	mu     sync.Mutex
	up     chan struct{} // closed while connections are forwarded
	conns  map[net.Conn]bool
	closed bool
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, to: to, up: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.up)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track adds c to the connections cut and close end; false once closed.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) forward(c net.Conn) {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	<-up // a cut holds the connection here; close closes it, and up
	u, err := net.Dial("tcp", p.to)
	if err != nil || !p.track(u) {
		c.Close()
		return
	}
	var wg sync.WaitGroup
	for _, d := range [][2]net.Conn{{c, u}, {u, c}} {
		wg.Go(func() {
			// Plain reads and writes: a splice would leave the
			// runtime's pipes open past the test's fd check.
			io.Copy(struct{ io.Writer }{d[0]}, struct{ io.Reader }{d[1]})
			d[0].Close()
			d[1].Close()
		})
	}
	wg.Wait()
}

// cut closes the connections and holds new ones until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = make(chan struct{})
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.up:
	default:
		close(p.up)
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.restore()
	p.wg.Wait()
}

// A watcher cut off its etcd while a node leaves and another joins, and
// the history it would resume from is compacted meanwhile, reports the
// leave and the join once it is back, and goes on watching: the node that
// left is not kept as a ghost.
func TestEtcdWatchAfterCompaction(t *testing.T) {
	host := startEtcd(t)
	px := newCutProxy(t, host)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := mustOpen(t, "etcd://"+host+"/wc", 10*time.Second)
	for _, id := range []string{"stays", "goes"} {
		if err := a.Register(ctx, entry(id, "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
	}
	w := mustOpen(t, "etcd://"+px.addr()+"/wc", 10*time.Second)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ch, err := w.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	joined := map[string]bool{}
	for range 2 {
		if ev := next(t, ch, 10*time.Second); ev.Kind == Join {
			joined[ev.Entry.NodeID] = true
		}
	}
	if !joined["stays"] || !joined["goes"] {
		t.Fatalf("first events: joins of %v, want stays and goes", joined)
	}

	churnWhileCut(t, ctx, host, px, a, "/wc", "goes")

	// The watch resumes from a compacted revision: etcd ends it, and the
	// watcher lists again.
	got := map[string]EventKind{}
	for len(got) < 2 {
		ev := next(t, ch, 30*time.Second)
		got[ev.Entry.NodeID] = ev.Kind
	}
	if got["goes"] != Leave || got["comes"] != Join || len(got) != 2 {
		t.Fatalf("events after the watch was compacted: %v, want goes' leave and comes' join", got)
	}
	// And it watches on, from the new list.
	if err := a.Deregister(ctx, "comes"); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch, 10*time.Second); ev.Kind != Leave || ev.Entry.NodeID != "comes" {
		t.Fatalf("event %v %s, want comes' leave", ev.Kind, ev.Entry.NodeID)
	}
	wcancel()
	for range ch {
	}
}

// churnWhileCut cuts px, then, on the etcd at host, removes node leaver
// from a (a directory at prefix), registers node "comes" and compacts the
// history, so that a watch through px cannot resume where it was; then it
// restores px.
func churnWhileCut(t *testing.T, ctx context.Context, host string, px *cutProxy, a Directory, prefix, leaver string) {
	t.Helper()
	px.cut()
	if err := a.Deregister(ctx, leaver); err != nil {
		t.Fatal(err)
	}
	if err := a.Register(ctx, entry("comes", "10.0.0.2:1")); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := cli.Get(ctx, prefix+"/nodes/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	px.restore()
}

package directory

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

func mustOpen(t *testing.T, url string, ttl time.Duration) Directory {
	t.Helper()
	d, err := Open(context.Background(), url, Options{TTL: ttl, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func entry(id, addr string) Entry {
	return Entry{NodeID: id, Addrs: []string{addr}, Transports: []string{"tcp", "rdma"},
		Exports: []Export{{Name: "kv", Len: 1 << 20}}, RDMA: &RDMAEndpoint{QPN: 0x1234, GID: "::ffff:10.0.0.1", PSN: 77}}
}

// next returns the next event, or fails after a while.
func next(t *testing.T, ch <-chan Event, within time.Duration) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(within):
		t.Fatalf("no event within %v", within)
	}
	return Event{}
}

// suite tests a backend through the Directory interface. open returns a new
// client of one shared backend, with its entries' TTL.
func suite(t *testing.T, open func(t *testing.T, ttl time.Duration) Directory) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("RegisterLookupList", func(t *testing.T) {
		a, b := open(t, 2*time.Second), open(t, 2*time.Second)
		if err := a.Register(ctx, entry("node-a", "10.0.0.1:7471")); err != nil {
			t.Fatal(err)
		}
		if err := b.Register(ctx, entry("node-b", "10.0.0.2:7471")); err != nil {
			t.Fatal(err)
		}
		got, err := b.Lookup(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if got.Addrs[0] != "10.0.0.1:7471" || got.RDMA == nil || got.RDMA.QPN != 0x1234 || got.Exports[0].Name != "kv" {
			t.Fatalf("lookup: %+v", got)
		}
		list, err := a.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{}
		for _, e := range list {
			ids = append(ids, e.NodeID)
		}
		if !slices.Equal(ids, []string{"node-a", "node-b"}) {
			t.Fatalf("list: %v", ids)
		}
		// Registering again replaces the entry.
		if err := a.Register(ctx, entry("node-a", "10.0.0.9:7471")); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Lookup(ctx, "node-a"); got.Addrs[0] != "10.0.0.9:7471" {
			t.Fatalf("after re-register: %+v", got)
		}
		if _, err := b.Lookup(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup of an unknown node: %v, want ErrNotFound", err)
		}
		if _, err := b.Lookup(ctx, "bad/id"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("lookup of a malformed id: %v, want ErrInvalid", err)
		}
		if err := a.Register(ctx, Entry{NodeID: "x"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("register of an entry without address: %v, want ErrInvalid", err)
		}
		if err := a.Deregister(ctx, "node-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(ctx, "node-a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup after deregister: %v, want ErrNotFound", err)
		}
	})

	t.Run("Watch", func(t *testing.T) {
		a, w := open(t, 2*time.Second), open(t, 2*time.Second)
		if err := a.Register(ctx, entry("early", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		ch, err := w.Watch(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev := next(t, ch, 10*time.Second); ev.Kind != Join || ev.Entry.NodeID != "early" {
			t.Fatalf("first event %v %s, want the node already there", ev.Kind, ev.Entry.NodeID)
		}
		if err := a.Register(ctx, entry("late", "10.0.0.2:1")); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, ch, 10*time.Second); ev.Kind != Join || ev.Entry.NodeID != "late" || ev.Entry.Addrs[0] != "10.0.0.2:1" {
			t.Fatalf("event %v %+v, want late's join", ev.Kind, ev.Entry)
		}
		if err := a.Deregister(ctx, "early"); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, ch, 10*time.Second); ev.Kind != Leave || ev.Entry.NodeID != "early" {
			t.Fatalf("event %v %s, want early's leave", ev.Kind, ev.Entry.NodeID)
		}
		wcancel()
		for range ch {
		}
	})

	t.Run("DeadNodeExpires", func(t *testing.T) {
		// A node that stops renewing (its process died: here its client is
		// cut off without deregistering) leaves when its TTL runs out.
		w := open(t, time.Second)
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		ch, err := w.Watch(wctx)
		if err != nil {
			t.Fatal(err)
		}
		dead := open(t, time.Second)
		if err := dead.Register(ctx, entry("dead", "10.0.0.3:1")); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, ch, 10*time.Second); ev.Kind != Join || ev.Entry.NodeID != "dead" {
			t.Fatalf("event %v %s, want dead's join", ev.Kind, ev.Entry.NodeID)
		}
		kill(dead)
		start := time.Now()
		if ev := next(t, ch, 30*time.Second); ev.Kind != Leave || ev.Entry.NodeID != "dead" {
			t.Fatalf("event %v %s, want dead's leave", ev.Kind, ev.Entry.NodeID)
		}
		t.Logf("the dead node's entry went %v after its last renewal stopped (TTL 1 s)", time.Since(start).Round(10*time.Millisecond))
		if _, err := w.Lookup(ctx, "dead"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup of the dead node: %v, want ErrNotFound", err)
		}
		wcancel()
		for range ch {
		}
	})

	t.Run("Close", func(t *testing.T) {
		a, b := open(t, 10*time.Second), open(t, 10*time.Second)
		if err := a.Register(ctx, entry("closing", "10.0.0.4:1")); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		// Close removed the entry at once, well before its 10 s TTL.
		if _, err := b.Lookup(ctx, "closing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("lookup after Close: %v, want ErrNotFound", err)
		}
		if err := a.Register(ctx, entry("closing", "10.0.0.4:1")); !errors.Is(err, ErrClosed) {
			t.Fatalf("register after Close: %v, want ErrClosed", err)
		}
	})
}

// kill cuts a client off as a dying process would: its renewals stop and
// nothing is deregistered.
func kill(d Directory) {
	switch d := d.(type) {
	case *httpDir:
		d.mu.Lock()
		for _, b := range d.regs {
			b.stop()
		}
		d.regs = map[string]*beat{}
		d.mu.Unlock()
	case *etcdDir:
		d.mu.Lock()
		for _, l := range d.regs {
			l.stop()
		}
		d.regs = map[string]*lease{}
		d.mu.Unlock()
	}
}

// TestCoordinator runs the suite against a coordinator on loopback.
func TestCoordinator(t *testing.T) {
	srv := httptest.NewServer(NewCoordinator(CoordinatorOptions{}))
	defer srv.Close()
	suite(t, func(t *testing.T, ttl time.Duration) Directory { return mustOpen(t, srv.URL, ttl) })
}

// TestCoordinatorBadRequests: malformed posts get a 4xx with a message
// that says what is wrong, and change nothing.
func TestCoordinatorBadRequests(t *testing.T) {
	c := NewCoordinator(CoordinatorOptions{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", stringsReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, errorBody(resp).Error()
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/nodes/a/rdma/endpoint", `{`, "decode"},
		{"/nodes/a/rdma/endpoint", `{"node_id":"b","addrs":["h:1"]}`, `for node "b"`},
		{"/nodes/a/rdma/endpoint", `{"node_id":"a","addrs":["nohost"]}`, "host:port"},
		{"/nodes/a/rdma/endpoint", `{"node_id":"a","addrs":["h:1"],"rdma":{"qpn":16777216,"gid":"::1"}}`, "2^24"},
		{"/nodes/a/rdma/endpoint", `{"node_id":"a","addrs":["h:1"],"transports":["Carrier Pigeon"]}`, "transport"},
		{"/nodes/a/rdma/endpoint?ttl=1h", `{"node_id":"a","addrs":["h:1"]}`, "ttl"},
		{"/nodes/a%20b/rdma/endpoint", `{"node_id":"a b","addrs":["h:1"]}`, "node id"},
	} {
		code, msg := post(tc.path, tc.body)
		if code != http.StatusBadRequest || !contains(msg, tc.want) {
			t.Errorf("POST %s %s: %d %q, want 400 mentioning %q", tc.path, tc.body, code, msg, tc.want)
		}
	}
	if n := c.Len(); n != 0 {
		t.Fatalf("%d entries after bad requests", n)
	}
}

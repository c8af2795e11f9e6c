package directory

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// expire removes node id's entry behind its registering client's back, as
// its expiry would: etcd revokes the lease, the coordinator forgets it.
func expire(t *testing.T, d Directory, id string) {
	t.Helper()
	switch d := d.(type) {
	case *etcdDir:
		d.mu.Lock()
		lid := d.regs[id].id
		d.mu.Unlock()
		if _, err := d.cli.Revoke(context.Background(), lid); err != nil {
			t.Fatal(err)
		}
	case *httpDir:
		req, _ := http.NewRequest(http.MethodDelete, d.url("/nodes/"+id), nil)
		resp, err := d.o.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("delete %s: %s", id, resp.Status)
		}
	default:
		t.Fatalf("expire: %T", d)
	}
}

// registration returns d's registration of id.
func registration(t *testing.T, d Directory, id string) Registration {
	t.Helper()
	for _, r := range d.Registrations() {
		if r.NodeID == id {
			return r
		}
	}
	t.Fatalf("no registration of %s in %+v", id, d.Registrations())
	return Registration{}
}

// waitFor polls cond until it holds, or fails after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healSuite tests what a backend does with lost entries and node IDs
// claimed twice.
func healSuite(t *testing.T, open func(t *testing.T, ttl time.Duration) Directory) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("LostEntryHeals", func(t *testing.T) {
		a, w := open(t, 2*time.Second), open(t, 2*time.Second)
		if err := a.Register(ctx, entry("heal", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		if r := registration(t, a, "heal"); r.State != Registered || r.Reregistrations != 0 {
			t.Fatalf("after Register: %+v", r)
		}
		expire(t, a, "heal")
		waitFor(t, 20*time.Second, "registered again", func() bool {
			r := registration(t, a, "heal")
			return r.State == Registered && r.Reregistrations == 1
		})
		got, err := w.Lookup(ctx, "heal")
		if err != nil || got.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("lookup after healing: %+v, %v", got, err)
		}
		// An update after healing lands in the new registration.
		if err := a.Register(ctx, entry("heal", "10.0.0.7:1")); err != nil {
			t.Fatal(err)
		}
		if got, _ := w.Lookup(ctx, "heal"); got.Addrs[0] != "10.0.0.7:1" {
			t.Fatalf("lookup after the update: %+v", got)
		}
	})

	t.Run("OneOwner", func(t *testing.T) {
		a, b := open(t, 2*time.Second), open(t, 2*time.Second)
		if err := a.Register(ctx, entry("dup", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		err := b.Register(ctx, entry("dup", "10.0.0.2:1"))
		var te *TakenError
		if !errors.Is(err, ErrTaken) || !errors.As(err, &te) || !strings.Contains(err.Error(), "dup") || !strings.Contains(err.Error(), "10.0.0.1:1") {
			t.Fatalf("second registration of a live ID: %v, want ErrTaken naming dup and 10.0.0.1:1", err)
		}
		if got, _ := b.Lookup(ctx, "dup"); got.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("the holder's entry was replaced: %+v", got)
		}
		if len(b.Registrations()) != 0 {
			t.Fatalf("the refused client keeps %+v", b.Registrations())
		}
		// A holder that lost its entry to another node does not take it
		// back, nor remove the other's: it stays lost, and retries.
		expire(t, a, "dup")
		waitFor(t, 10*time.Second, "b registers the free ID", func() bool {
			return b.Register(ctx, entry("dup", "10.0.0.2:1")) == nil
		})
		waitFor(t, 20*time.Second, "a sees it is taken", func() bool {
			r := registration(t, a, "dup")
			return r.State == Lost && strings.Contains(r.LastError, "10.0.0.2:1")
		})
		if err := a.Deregister(ctx, "dup"); err != nil {
			t.Fatalf("deregister of a lost entry: %v", err)
		}
		if got, err := b.Lookup(ctx, "dup"); err != nil || got.Addrs[0] != "10.0.0.2:1" {
			t.Fatalf("after the old holder deregistered: %+v, %v; want b's entry", got, err)
		}
		// A restarted node (a new client) registers once the ID is free.
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		c := open(t, 2*time.Second)
		if err := c.Register(ctx, entry("dup", "10.0.0.3:1")); err != nil {
			t.Fatalf("registration after the holder closed: %v", err)
		}
	})
}

func TestHealCoordinator(t *testing.T) {
	srv := httptest.NewServer(NewCoordinator(CoordinatorOptions{}))
	defer srv.Close()
	healSuite(t, func(t *testing.T, ttl time.Duration) Directory { return mustOpen(t, srv.URL, ttl) })
}

func TestHealEtcd(t *testing.T) {
	host := startEtcd(t)
	healSuite(t, func(t *testing.T, ttl time.Duration) Directory {
		return mustOpen(t, "etcd://"+host+"/"+t.Name(), ttl)
	})
}

// TestEtcdRestartHeals: etcd is killed for longer than the TTL and started
// again on its data: the node's lease is lost, and the node registers
// again with a new one.
func TestEtcdRestartHeals(t *testing.T) {
	e := etcdtest.StartRestartable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	url := "etcd://" + e.Host + "/restart"
	d := mustOpen(t, url, 2*time.Second)
	if err := d.Register(ctx, entry("ek", "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	waitFor(t, 20*time.Second, "the lease is lost", func() bool { return registration(t, d, "ek").State == Lost })
	time.Sleep(time.Second)
	e.Start()
	waitFor(t, 30*time.Second, "registered again", func() bool {
		r := registration(t, d, "ek")
		return r.State == Registered && r.Reregistrations == 1
	})
	w := mustOpen(t, url, 2*time.Second)
	// The entry stays: longer than its TTL after the restart, so the old
	// lease that etcd restored has expired by then.
	time.Sleep(4 * time.Second)
	if got, err := w.Lookup(ctx, "ek"); err != nil || got.Addrs[0] != "10.0.0.1:1" {
		t.Fatalf("lookup after the restart: %+v, %v", got, err)
	}
}

// TestCoordinatorRestartHeals: a coordinator that restarts forgets every
// entry; the nodes' heartbeats register them again.
func TestCoordinatorRestartHeals(t *testing.T) {
	var c atomic.Pointer[Coordinator]
	c.Store(NewCoordinator(CoordinatorOptions{}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.Load().ServeHTTP(w, r) }))
	defer srv.Close()
	d := mustOpen(t, srv.URL, time.Second)
	ctx := context.Background()
	if err := d.Register(ctx, entry("ck", "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	c.Store(NewCoordinator(CoordinatorOptions{})) // the restart: an empty one on the same address
	if c.Load().Len() != 0 {
		t.Fatal("the new coordinator is not empty")
	}
	waitFor(t, 10*time.Second, "registered again", func() bool {
		r := registration(t, d, "ck")
		return r.State == Registered && r.Reregistrations == 1 && c.Load().Len() == 1
	})
}

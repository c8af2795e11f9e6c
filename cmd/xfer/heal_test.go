package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// TestServeNodeIDOwnedAndHealed: a second `xfer serve` that claims a live
// node ID fails to start, naming the ID and the holder's address; a
// holder paused (SIGSTOP) beyond its TTL loses its entry and, resumed,
// registers again. Against a coordinator and an etcd.
func TestServeNodeIDOwnedAndHealed(t *testing.T) {
	for _, backend := range []string{"coordinator", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			var url string
			if backend == "coordinator" {
				coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
				t.Cleanup(coord.Close)
				url = coord.URL
			} else {
				url = "etcd://" + etcdtest.Start(t) + "/heal"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, addr := startStoppable(t, serveBanner, "serve", "--listen", "127.0.0.1:0", "--transport", "tcp",
				"--directory", url, "--node-id", "ek", "--directory-ttl", "2s")
			_, e, code := xferRun(t, cleanEnv(), "serve", "--listen", "127.0.0.1:0", "--transport", "tcp",
				"--directory", url, "--node-id", "ek", "--directory-ttl", "2s")
			if code == 0 || !strings.Contains(e, "node ID ek") || !strings.Contains(e, addr) {
				t.Fatalf("a second serve with a live node ID: exit %d: %s; want an error naming ek and %s", code, e, addr)
			}
			d, err := directory.Open(ctx, url, directory.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			lookup := func() (directory.Entry, error) {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return d.Lookup(lctx, "ek")
			}
			if ent, err := lookup(); err != nil || ent.Addrs[0] != addr {
				t.Fatalf("lookup: %+v, %v; want the first serve at %s", ent, err, addr)
			}
			testutil.Pause(t, a.Process)
			deadline := time.Now().Add(20 * time.Second)
			for {
				if _, err := lookup(); errors.Is(err, directory.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the paused node's entry did not expire")
				}
				time.Sleep(100 * time.Millisecond)
			}
			a.Process.Signal(syscall.SIGCONT)
			deadline = time.Now().Add(20 * time.Second)
			for {
				ent, err := lookup()
				if err == nil && ent.Addrs[0] == addr {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the resumed node did not register again: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

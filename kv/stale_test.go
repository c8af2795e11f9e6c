package kv

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// staleRounds is how many times TestClusterNoStaleReads pauses a server.
const staleRounds = 20

// TestClusterNoStaleReads: three KV servers, each a process of its own,
// registered in a directory (a coordinator, then an etcd); keys spread
// over all of them. Each round writes every key, stops one server
// (SIGSTOP) until the cluster has dropped it, overwrites every key (each
// write acknowledged), resumes the server, and reads every key again and
// again while the server rejoins: each GET must return the latest
// acknowledged value or "not found", never the value before it.
func TestClusterNoStaleReads(t *testing.T) {
	if testing.Short() {
		t.Skip("three server processes, paused and resumed for 20 rounds: skipped in -short mode")
	}
	t.Run("coordinator", func(t *testing.T) {
		coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
		defer coord.Close()
		testNoStaleReads(t, coord.URL, time.Second)
	})
	t.Run("etcd", func(t *testing.T) {
		testNoStaleReads(t, "etcd://"+etcdtest.Start(t)+"/stale", 2*time.Second)
	})
}

func testNoStaleReads(t *testing.T, url string, ttl time.Duration) {
	ids := []string{"kv-1", "kv-2", "kv-3"}
	procs := map[string]*exec.Cmd{}
	for _, id := range ids {
		procs[id] = startClusterServer(t, url, id, ttl, xfer.PolicyTCP)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGCONT)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := DialCluster(ctx, ClusterOptions{Directory: url, Client: ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, time.Minute, "three servers", func() bool { return slices.Equal(c.Servers(), ids) })

	const n = 24
	keys := make([]string, n)
	spread := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("s-%d", i+1)
		spread[c.Owner(keys[i])]++
	}
	if len(spread) != 3 {
		t.Fatalf("the keys are placed on %v: want all three servers", spread)
	}
	putAll := func(v string) {
		t.Helper()
		for _, k := range keys {
			if err := c.Put(ctx, k, []byte(v)); err != nil {
				t.Fatalf("put %s=%s: %v", k, v, err)
			}
		}
	}
	var reads, found, missing, stale int
	for r := range staleRounds {
		old, latest := fmt.Sprintf("old-%d", r), fmt.Sprintf("new-%d", r)
		putAll(old)
		victim := ids[r%len(ids)]
		testutil.Pause(t, procs[victim].Process)
		waitFor(t, time.Minute, "the cluster dropping the paused "+victim, func() bool { return !slices.Contains(c.Servers(), victim) })
		putAll(latest) // every write acknowledged
		procs[victim].Process.Signal(syscall.SIGCONT)
		// Read while the paused server resumes, finds it lost its entry,
		// registers again and rejoins.
		for end := time.Now().Add(2*ttl + time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			for _, k := range keys {
				v, err := c.Get(ctx, k)
				reads++
				switch {
				case err == nil && string(v) == latest:
					found++
				case errors.Is(err, ErrNotFound):
					missing++
				case err == nil:
					stale++
					t.Errorf("round %d (%s paused): get %s = %q after %q was acknowledged", r, victim, k, v, latest)
				case errors.Is(err, ErrUnavailable):
				default:
					t.Fatalf("round %d: get %s: %v", r, k, err)
				}
			}
		}
		waitFor(t, time.Minute, victim+" back", func() bool { return slices.Equal(c.Servers(), ids) })
	}
	t.Logf("%d rounds, %d reads: %d of the latest value, %d not found, %d stale", staleRounds, reads, found, missing, stale)
	if stale != 0 {
		t.Fatalf("%d stale reads", stale)
	}
}

package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// scaleEnv, set to the number of servers (64 in `make scale-test`), runs
// TestScale; it is not part of the default run.
const scaleEnv = "XFER_SCALE_TEST"

// TestScale is the one-host simulation of a large cluster: N KV servers
// (XFER_SCALE_TEST, at least 3), each a process with a small pool,
// registered in one etcd. A verified bench runs over a Cluster client
// while N/8 servers (at least one) join, then N/8 are SIGKILLed, each
// restarted at once under its ID. Each key has one writer, which knows the version it
// last had acknowledged; a GET must return that version or a later one,
// or "not found", never an earlier one. It fails on a stale read, an
// operation that does not end within its deadline, a server that dropped
// all its values (a continuity break) while it ran, or a restarted server
// that does not take writes within 3 s of its start. It logs what etcd was asked
// per server per second while the cluster was idle.
func TestScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(scaleEnv))
	if n == 0 {
		t.Skip(scaleEnv + " is not set: run `make scale-test`")
	}
	if n < 3 {
		t.Fatalf("%s=%d: at least 3", scaleEnv, n)
	}
	churn := max(n/8, 1)
	const ttl = 4 * time.Second
	url := "etcd://" + etcdtest.Start(t) + "/scale"
	files := t.TempDir()
	type server struct {
		id  string
		cmd *exec.Cmd
	}
	var mu sync.Mutex
	servers := map[string]*server{}
	start := func(id string) time.Duration {
		t.Helper()
		begin := time.Now()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			clusterServerEnv+"="+strings.Join([]string{url, id, ttl.String(), string(xfer.PolicyTCP), "-"}, " "),
			fenceFileEnv+"="+filepath.Join(files, id))
		cmd.Stderr = os.Stderr
		if line := testutil.StartProcess(t, cmd); line != "ready" {
			t.Fatalf("server %s printed %q, want ready", id, line)
		}
		mu.Lock()
		servers[id] = &server{id: id, cmd: cmd}
		mu.Unlock()
		return time.Since(begin)
	}
	ids := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("kv-%03d", i))
		}
		return out
	}
	first := ids(0, n-churn)
	var wg sync.WaitGroup
	gate := make(chan struct{}, 8) // starts at once
	for _, id := range first {
		wg.Go(func() {
			gate <- struct{}{}
			defer func() { <-gate }()
			start(id)
		})
	}
	wg.Wait()
	began := time.Now()
	t.Logf("%d servers started", len(first))

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fds0 := openFDs(t)
	c, err := DialCluster(ctx, ClusterOptions{Directory: url, Client: ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 32}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, time.Minute, fmt.Sprint(len(first), " servers"), func() bool { return len(c.Servers()) == len(first) })

	// Idle: what etcd is asked per server per second.
	time.Sleep(2 * time.Second)
	r0, w0, k0 := etcdCalls(t)
	time.Sleep(10 * time.Second)
	r1, w1, k1 := etcdCalls(t)
	per := func(a, b float64) float64 { return (b - a) / float64(len(first)) / 10 }
	t.Logf("idle, %d servers: per server per second %.2f range requests, %.2f watch-stream messages (syncs), %.2f lease keep-alives",
		len(first), per(r0, r1), per(w0, w1), per(k0, k1))

	// The verified bench: workers, each the one writer of its keys.
	const workers, keysPer = 8, 64
	var ops, found, missing, stale, unavailable, failed atomic.Int64
	stop := make(chan struct{})
	var bench sync.WaitGroup
	for w := range workers {
		bench.Go(func() {
			acked := make([]int, keysPer)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for v := 1; ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(keysPer)
				key := fmt.Sprintf("w%d-k%d", w, i)
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				err := c.Put(octx, key, []byte(strconv.Itoa(v)))
				ops.Add(1)
				switch {
				case err == nil:
					acked[i] = v
				case octx.Err() != nil:
					failed.Add(1)
					t.Errorf("put %s did not end within 30 s: %v", key, err)
				case errors.Is(err, ErrUnavailable), errors.Is(err, ErrMoved):
					unavailable.Add(1)
				}
				j := rng.IntN(keysPer)
				key = fmt.Sprintf("w%d-k%d", w, j)
				val, err := c.Get(octx, key)
				ops.Add(1)
				switch {
				case err == nil:
					got, _ := strconv.Atoi(string(val))
					if got < acked[j] {
						stale.Add(1)
						t.Errorf("get %s = version %d after version %d was acknowledged", key, got, acked[j])
					} else {
						found.Add(1)
					}
				case errors.Is(err, ErrNotFound):
					missing.Add(1)
				case octx.Err() != nil:
					failed.Add(1)
					t.Errorf("get %s did not end within 30 s: %v", key, err)
				case errors.Is(err, ErrUnavailable):
					unavailable.Add(1)
				}
				ocancel()
			}
		})
	}
	time.Sleep(3 * time.Second)
	t.Logf("%v: the bench runs; servers joining: %d", time.Since(began).Round(time.Second), churn)

	// Joins.
	for _, id := range ids(n-churn, n) {
		start(id)
	}
	waitFor(t, time.Minute, fmt.Sprint(n, " servers"), func() bool { return len(c.Servers()) == n })
	time.Sleep(2 * time.Second)
	t.Logf("%v: %d servers; killed and restarted one by one: %d", time.Since(began).Round(time.Second), n, churn)
	// Kills, SIGKILL (no deregistration), each followed at once by a
	// restart under the same ID: it takes its ID over from its dead
	// predecessor rather than waiting for the old lease to expire.
	victims := make([]string, 0, churn)
	for i := range churn {
		victims = append(victims, first[i*len(first)/churn])
	}
	var slowest time.Duration
	for _, id := range victims {
		probe := "" // a key the victim owns
		for i := 0; probe == ""; i++ {
			if k := fmt.Sprintf("probe-%s-%d", id, i); c.Owner(k) == id {
				probe = k
			}
		}
		mu.Lock()
		s := servers[id]
		mu.Unlock()
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
		os.Remove(filepath.Join(files, id))
		begin := time.Now()
		start(id)
		// Serving: a write of a key it owns is taken.
		for {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.Put(pctx, probe, []byte("x"))
			pcancel()
			if err == nil {
				break
			}
			if time.Since(begin) > 30*time.Second {
				t.Fatalf("restarted %s takes no write after 30 s: %v", id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		slowest = max(slowest, time.Since(begin))
	}
	t.Logf("the slowest same-ID restart took writes %v after its process was started", slowest.Round(time.Millisecond))
	if slowest > 3*time.Second {
		t.Errorf("a same-ID restart took %v to take writes, want at most 3 s", slowest)
	}
	time.Sleep(5 * time.Second)
	close(stop)
	bench.Wait()
	t.Logf("the client: %d descriptors open for %d servers", openFDs(t)-fds0, len(c.Servers()))

	// No server that ran throughout dropped all its values.
	for _, id := range ids(0, n) {
		if slices.Contains(victims, id) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(files, id))
		if err != nil {
			t.Errorf("server %s: %v", id, err)
			continue
		}
		if string(b) != "0" {
			t.Errorf("server %s dropped all its values %s times", id, b)
		}
	}
	t.Logf("%d servers (%d joined, %d killed and restarted): %d ops, %d found, %d not found, %d unavailable, %d stale, %d that did not end",
		n, churn, churn, ops.Load(), found.Load(), missing.Load(), unavailable.Load(), stale.Load(), failed.Load())
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

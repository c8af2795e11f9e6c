package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// clusterServerEnv, set to "DIRECTORY NODE-ID TTL TRANSPORT DEVICE" (DEVICE
// "-" for none), makes the test binary
// a KV server registered in the directory until it is killed
// (startClusterServer).
const clusterServerEnv = "XFER_KV_CLUSTER_SERVER"

// clusterServer is the body of a server process.
func clusterServer(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 5 {
		return fmt.Errorf("%s=%q: want DIRECTORY NODE-ID TTL TRANSPORT DEVICE", clusterServerEnv, spec)
	}
	cfg := xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.Policy(f[3]), MemoryMB: 16}
	if f[4] != "-" {
		cfg.RDMA.Device = f[4]
	}
	ttl, err := time.ParseDuration(f[2])
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg.Directory, cfg.NodeID, cfg.DirectoryTTL = f[0], f[1], ttl
	s, err := NewServer(ctx, ServerOptions{Engine: cfg})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if err := s.Advertise(ctx, lis.Addr().String()); err != nil {
		return err
	}
	if path := os.Getenv(fenceFileEnv); path != "" {
		go reportFence(s, path)
	}
	fmt.Println("ready")
	return s.Serve(ctx, lis)
}

// fenceFileEnv names a file where a server process started by a test
// writes its fence's continuity breaks, every 100 ms (reportFence).
const fenceFileEnv = "XFER_KV_FENCE_FILE"

// reportFence writes s's fence's breaks to path, as a decimal number,
// every 100 ms, until the process ends.
func reportFence(s *Server, path string) {
	for range time.Tick(100 * time.Millisecond) {
		if f := s.fence.Load(); f != nil {
			os.WriteFile(path+".tmp", []byte(fmt.Sprint(f.breaks.Load())), 0o600)
			os.Rename(path+".tmp", path)
		}
	}
}

// startClusterServer runs a KV server in a process of its own, registered
// as node id, and returns it once it is listed; the test kills it at the
// end if it has not.
func startClusterServer(t *testing.T, dir, id string, ttl time.Duration, policy xfer.Policy) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	dev := cmp.Or(rdmaDevice, "-")
	cmd.Env = append(os.Environ(), clusterServerEnv+"="+strings.Join([]string{dir, id, ttl.String(), string(policy), dev}, " "))
	cmd.Stderr = os.Stderr
	if line := testutil.StartProcess(t, cmd); line != "ready" {
		t.Fatalf("server %s printed %q, want ready", id, line)
	}
	return cmd
}

// TestClusterLosesServer: three KV servers, each a process registered in
// an embedded etcd with a lease, and a Cluster spreading keys over them.
// One server is killed (SIGKILL: it cannot deregister). Before its lease
// expires, the keys of the other two are served and GETs of the lost keys
// say "not found"; once it expired, the cluster has dropped the server and
// new keys land on the two survivors only.
func TestClusterLosesServer(t *testing.T) { testClusterLosesServer(t, xfer.PolicyTCP) }

// testClusterLosesServer is TestClusterLosesServer over policy (TestRDMA
// runs it over rdma).
func testClusterLosesServer(t *testing.T, policy xfer.Policy) {
	const ttl = 5 * time.Second
	url := "etcd://" + etcdtest.Start(t) + "/kvcluster"
	ids := []string{"kv-1", "kv-2", "kv-3"}
	procs := map[string]*exec.Cmd{}
	for _, id := range ids {
		procs[id] = startClusterServer(t, url, id, ttl, policy)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ecfg := xfer.Config{Transport: policy, MemoryMB: 16}
	ecfg.RDMA.Device = rdmaDevice
	c, err := DialCluster(ctx, ClusterOptions{Directory: url, Client: ClientOptions{EngineConfig: ecfg}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, time.Minute, "three servers", func() bool { return slices.Equal(c.Servers(), ids) })

	const n = 60
	owner := map[string]string{}
	count := map[string]uint64{}
	for i := range n {
		k := fmt.Sprintf("k%d", i)
		if err := c.Put(ctx, k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
		owner[k] = c.Owner(k)
		count[owner[k]]++
	}
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if count[id] == 0 || st[id].Keys != count[id] {
			t.Fatalf("server %s holds %d keys, the placement put %d there (want some on each)", id, st[id].Keys, count[id])
		}
	}

	lost := "kv-2"
	procs[lost].Process.Kill()
	procs[lost].Wait()

	for i := range n {
		k := fmt.Sprintf("k%d", i)
		v, err := c.Get(ctx, k)
		if owner[k] == lost {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("get %s of the lost server: %q, %v; want not found", k, v, err)
			}
			continue
		}
		if err != nil || string(v) != "value of "+k {
			t.Fatalf("get %s of %s: %q, %v", k, owner[k], v, err)
		}
	}
	d, err := directory.Open(ctx, url, directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Lookup(ctx, lost); err != nil {
		t.Fatalf("the lost server's entry is gone already (%v): the GETs were not within its lease", err)
	}

	// Its lease expires: the cluster drops it.
	waitFor(t, time.Minute, "expiry of the lost server's lease", func() bool {
		_, err := d.Lookup(ctx, lost)
		return errors.Is(err, directory.ErrNotFound)
	})
	waitFor(t, time.Minute, "the cluster dropping the lost server", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.members[lost]
		// The placement's snapshot follows the members a moment later.
		return !ok && len(c.members) == 2 && len(c.snap.Load().ms) == 2
	})
	if got := c.Servers(); !slices.Equal(got, []string{"kv-1", "kv-3"}) {
		t.Fatalf("servers %v after the lease expired", got)
	}
	added := map[string]uint64{}
	for i := range n {
		k := fmt.Sprintf("new%d", i)
		if err := c.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
		o := c.Owner(k)
		if o == lost || o == "" {
			t.Fatalf("new key %s placed on %q", k, o)
		}
		added[o]++
		if v, err := c.Get(ctx, k); err != nil || string(v) != k {
			t.Fatalf("get %s: %q, %v", k, v, err)
		}
	}
	st2, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kv-1", "kv-3"} {
		if added[id] == 0 || st2[id].Keys != st[id].Keys+added[id] {
			t.Errorf("server %s: %d keys, was %d, and %d new ones were placed there", id, st2[id].Keys, st[id].Keys, added[id])
		}
	}
}

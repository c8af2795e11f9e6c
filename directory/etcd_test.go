package directory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

func freePort(t testing.TB) int { return etcdtest.FreePort(t) }

func startEtcd(t testing.TB) string { return etcdtest.Start(t) }

// TestEtcd runs the directory suite against an embedded etcd.
func TestEtcd(t *testing.T) {
	host := startEtcd(t)
	suite(t, func(t *testing.T, ttl time.Duration) Directory {
		return mustOpen(t, "etcd://"+host+"/"+t.Name(), ttl)
	})
}

// TestEtcdServerBinary runs the suite against Debian's etcd-server, the
// binary an operator runs. make test installs it; without it the test
// skips, or fails when XFER_REQUIRE_ETCD=1 (as in CI).
func TestEtcdServerBinary(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		for _, p := range []string{"/usr/bin/etcd", "/usr/sbin/etcd"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
			}
		}
	}
	if err != nil {
		if os.Getenv("XFER_REQUIRE_ETCD") == "1" {
			t.Fatal("XFER_REQUIRE_ETCD=1 but no etcd binary: apt-get install etcd-server")
		}
		t.Skip("no etcd binary (apt-get install etcd-server; make test installs it)")
	}
	client := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var cmd *exec.Cmd
	kill := func() {
		if cmd != nil {
			cmd.Process.Kill()
			cmd.Wait()
			cmd = nil
		}
	}
	t.Cleanup(kill)
	start := func() {
		cmd = exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer,
			"--log-level", "error")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until it answers.
		deadline := time.Now().Add(30 * time.Second)
		for {
			d, err := Open(context.Background(), "etcd://"+client+"/probe", Options{DialTimeout: time.Second})
			if err == nil {
				d.Close()
				break
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(log.Name())
				t.Fatalf("%s did not answer in 30 s: %v\n%s", bin, err, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	start()
	open := func(t *testing.T, ttl time.Duration) Directory {
		return mustOpen(t, "etcd://"+client+"/"+t.Name(), ttl)
	}
	suite(t, open)
	healSuite(t, open)

	// Stopped (SIGSTOP): each request without a deadline of its own ends
	// after RequestTimeout with an error that names the server, and works
	// again once it runs.
	t.Run("Stopped", func(t *testing.T) {
		d := mustOpenOpts(t, "etcd://"+client+"/"+t.Name(), Options{TTL: 10 * time.Second, RequestTimeout: time.Second})
		if err := d.Register(context.Background(), entry("sk", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		testutil.Pause(t, cmd.Process)
		defer cmd.Process.Signal(syscall.SIGCONT)
		for name, call := range map[string]func() error{
			"lookup":     func() error { _, err := d.Lookup(context.Background(), "sk"); return err },
			"list":       func() error { _, err := d.List(context.Background()); return err },
			"register":   func() error { return d.Register(context.Background(), entry("sk2", "10.0.0.2:1")) },
			"deregister": func() error { return d.Deregister(context.Background(), "sk") },
		} {
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), client) {
					t.Errorf("%s against a stopped etcd: %v, want an error naming %s", name, err, client)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s against a stopped etcd still blocks after 30s (RequestTimeout 1s)", name)
			}
		}
		cmd.Process.Signal(syscall.SIGCONT)
		waitFor(t, 30*time.Second, "lookups again", func() bool {
			_, err := d.Lookup(context.Background(), "sk")
			return err == nil || errors.Is(err, ErrNotFound)
		})
	})

	// Killed for longer than the TTL, and started again on its data: the
	// lease is lost, and the node registers again.
	t.Run("KilledAndRestarted", func(t *testing.T) {
		d := open(t, 2*time.Second)
		if err := d.Register(context.Background(), entry("ek", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		kill()
		waitFor(t, 20*time.Second, "the lease is lost", func() bool { return registration(t, d, "ek").State == Lost })
		start()
		waitFor(t, 30*time.Second, "registered again", func() bool {
			r := registration(t, d, "ek")
			return r.State == Registered && r.Reregistrations == 1
		})
		time.Sleep(3 * time.Second) // the lease etcd restored has expired by now
		if got, err := open(t, time.Second).Lookup(context.Background(), "ek"); err != nil || got.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("lookup after the restart: %+v, %v", got, err)
		}
	})
}

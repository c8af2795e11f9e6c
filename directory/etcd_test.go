package directory

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd starts a one-member etcd cluster in this process, on loopback,
// the way Kubernetes' etcd test server does, and returns its client
// endpoint (host:port).
func startEtcd(t testing.TB) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		e.Close()
		<-e.Server.StopNotify()
	})
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		t.Fatal("etcd did not become ready in 30 s")
	}
	return client.Host
}

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
	cmd := exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer,
		"--log-level", "error")
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
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
	suite(t, func(t *testing.T, ttl time.Duration) Directory {
		return mustOpen(t, "etcd://"+client+"/"+t.Name(), ttl)
	})
}

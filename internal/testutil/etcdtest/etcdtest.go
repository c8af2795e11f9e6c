// Package etcdtest starts a one-member etcd cluster inside a test process
// (go.etcd.io/etcd/server/v3/embed), on loopback, the way Kubernetes' etcd
// test server does, for the tests of every package that registers nodes in
// etcd (directory, the engine, kv, the xfer command).
//
// It is its own package, apart from internal/testutil, so that only the
// test binaries that start an etcd link the etcd server.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts an etcd in this process, stopped when the test ends, and
// returns its client endpoint (host:port).
func Start(t testing.TB) string {
	t.Helper()
	host, _ := StartStoppable(t)
	return host
}

// StartStoppable is Start, and also returns a function that stops the etcd
// before the test ends (once; later calls, and the test's end, do nothing
// more): a test of what its clients do when it is gone.
func StartStoppable(t testing.TB) (host string, stop func()) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			e.Close()
			<-e.Server.StopNotify()
		})
	}
	t.Cleanup(stop)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		t.Fatal("etcd did not become ready in 30 s")
	}
	return client.Host, stop
}

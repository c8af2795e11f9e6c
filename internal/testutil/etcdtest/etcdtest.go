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
	e := StartRestartable(t)
	return e.Host, e.Stop
}

// Etcd is an etcd in this process that a test can stop and start again,
// on the same address and data directory, as an operator restarts one.
type Etcd struct {
	Host string // the client endpoint, host:port

	t      testing.TB
	dir    string
	client url.URL
	peer   url.URL
	mu     sync.Mutex
	e      *embed.Etcd
}

// StartRestartable starts an etcd that Stop stops and Start starts again;
// the test's end stops it.
func StartRestartable(t testing.TB) *Etcd {
	t.Helper()
	x := &Etcd{t: t, dir: t.TempDir(),
		client: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))},
		peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))}}
	x.Host = x.client.Host
	t.Cleanup(x.Stop)
	x.Start()
	return x
}

// Start starts the etcd, unless it runs, and waits until it is ready.
func (x *Etcd) Start() {
	x.t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = x.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{x.client}, []url.URL{x.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{x.peer}, []url.URL{x.peer}
	cfg.InitialCluster = cfg.Name + "=" + x.peer.String()
	var e *embed.Etcd
	var err error
	// The ports of a stopped etcd may take a moment to be free again.
	for i := 0; ; i++ {
		if e, err = embed.StartEtcd(cfg); err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		x.t.Fatalf("start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		x.t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		e.Server.Stop()
		x.t.Fatal("etcd did not become ready in 30 s")
	}
	x.e = e
}

// Stop stops the etcd, if it runs.
func (x *Etcd) Stop() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.e == nil {
		return
	}
	x.e.Close()
	<-x.e.Server.StopNotify()
	x.e = nil
}

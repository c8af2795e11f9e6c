// Package etcdtest starts a one-member etcd cluster inside a test process
// (go.etcd.io/etcd/server/v3/embed), on loopback, the way Kubernetes' etcd
// test server does, for the tests of every package that registers nodes in
// etcd (directory, the engine, kv, the xfer command).
//
// It is its own package, apart from internal/testutil, so that only the
// test binaries that start an etcd link the etcd server.
package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
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
	tls    *transport.TLSInfo // the client port's TLS (StartTLS), or nil
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
	return start(t, nil)
}

// StartTLS is Start with TLS on the client port, as tls says (its files,
// and ClientCertAuth to require a client certificate that its
// TrustedCAFile signed).
func StartTLS(t testing.TB, tls transport.TLSInfo) string {
	t.Helper()
	return start(t, &tls).Host
}

func start(t testing.TB, tls *transport.TLSInfo) *Etcd {
	t.Helper()
	scheme := "http"
	if tls != nil {
		scheme = "https"
	}
	x := &Etcd{t: t, tls: tls, dir: t.TempDir(),
		client: url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", FreePort(t))},
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
	if x.tls != nil {
		cfg.ClientTLSInfo = *x.tls
	}
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

// WritePKI writes, under dir, a CA (ca.pem), a server certificate for
// 127.0.0.1 (server.pem, server-key.pem) and a client certificate
// (client.pem, client-key.pem) that it signed, and a client certificate
// that another CA signed (rogue.pem, rogue-key.pem): the certificates of a
// test of TLS with client certificates (StartTLS).
func WritePKI(t testing.TB, dir string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serial := int64(1)
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		k := newKey()
		return issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil, k), k
	}
	leaf := func(name string, caCert *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage, ips ...net.IP) {
		k := newKey()
		c := issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}, caCert, caKey, k)
		write(name+".pem", "CERTIFICATE", c.Raw)
		write(name+"-key.pem", "EC PRIVATE KEY", keyDER(k))
	}
	caCert, caKey := ca("xfer test CA")
	write("ca.pem", "CERTIFICATE", caCert.Raw)
	leaf("server", caCert, caKey, x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	leaf("client", caCert, caKey, x509.ExtKeyUsageClientAuth)
	rogueCA, rogueKey := ca("another CA")
	leaf("rogue", rogueCA, rogueKey, x509.ExtKeyUsageClientAuth)
}

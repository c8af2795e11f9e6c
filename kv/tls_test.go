package kv

import (
	"path/filepath"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// TestMutualTLS: a server with TLS and a client CA serves a client with a
// certificate that CA signed, and not one without.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	etcdtest.WritePKI(t, dir)
	file := func(name string) string { return filepath.Join(dir, name) }
	caPath := file("ca.pem")
	srvCert, srvKey := file("server.pem"), file("server-key.pem")
	cliCert, cliKey := file("client.pem"), file("client-key.pem")
	stls, err := LoadTLS(true, srvCert, srvKey, caPath, "")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Secret: testSecret}, TLS: stls})
	ctls, err := LoadTLS(false, cliCert, cliKey, caPath, "")
	if err != nil {
		t.Fatal(err)
	}
	c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}, TLS: ctls})
	if err := c.Put(ctxT(t), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	noCert, _ := LoadTLS(false, "", "", caPath, "")
	_, err = Dial(ctxT(t), s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 4, Secret: testSecret}, TLS: noCert, FailFast: true})
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := LoadTLS(true, "", "", caPath, ""); err == nil {
		t.Fatal("a TLS server without a certificate accepted")
	}
}

package kv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// writeCert writes a PEM certificate and key signed by parent (self-signed
// when parent is nil) and returns them with the paths.
func writeCert(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key, cp, kp
}

// TestMutualTLS: a server with TLS and a client CA serves a client with a
// certificate that CA signed, and not one without.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caPath, _ := writeCert(t, dir, "ca", true, nil, nil)
	_, _, srvCert, srvKey := writeCert(t, dir, "server", false, ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "client", false, ca, caKey)
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

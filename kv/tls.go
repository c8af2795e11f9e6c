package kv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadTLS builds the TLS configuration of a server (ServerOptions.TLS) or
// a client (ClientOptions.TLS) from PEM files: cert and key are this side's
// certificate (a client's makes TLS mutual), ca the authority that signed
// the other side's (for a server, requiring a client certificate it
// signed; for a client, instead of the system's roots). A server needs
// cert and key. serverName, for a client, is the name the server's
// certificate must carry (default: the host dialed).
func LoadTLS(server bool, cert, key, ca, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if (cert == "") != (key == "") {
		return nil, errors.New("kv: tls: give both the certificate and its key, or neither")
	}
	if server && cert == "" {
		return nil, errors.New("kv: tls: a server needs a certificate and its key (tls_cert, tls_key)")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("kv: tls: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("kv: tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kv: tls: %s holds no PEM certificate", ca)
		}
		if server {
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		} else {
			c.RootCAs = pool
		}
	}
	return c, nil
}

package directory

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// LoadTLS builds the TLS configuration of a directory client (Options.TLS)
// from PEM files: cert and key are the client's certificate, which an etcd
// with --client-cert-auth requires; ca is the authority that signed the
// server's certificate (default: the system's roots). Every argument may
// be empty, but cert and key go together. An etcd with users and
// passwords takes them beside a certificate (Options.Username).
func LoadTLS(cert, key, ca string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if (cert == "") != (key == "") {
		return nil, errors.New("directory: tls: give both the client certificate and its key (directory_tls_cert, directory_tls_key), or neither")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("directory: tls: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("directory: tls: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("directory: tls: CA file %s holds no PEM certificate", ca)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// tlsQuery are the query parameters of an etcd URL that name TLS files:
// etcd://HOST:2379/PREFIX?cert=FILE&key=FILE&ca=FILE.
var tlsQuery = []string{"cert", "key", "ca"}

// tlsFromQuery returns the TLS configuration that an etcd URL's query
// names, nil when it names none. A query parameter that is not one of
// tlsQuery, or one given twice, is an error.
func tlsFromQuery(raw string) (*tls.Config, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("directory: etcd URL: bad query %q: %w", raw, err)
	}
	files := map[string]string{}
	for k, v := range q {
		known := false
		for _, name := range tlsQuery {
			known = known || k == name
		}
		if !known {
			return nil, fmt.Errorf("directory: etcd URL: unknown parameter %q: want cert, key and ca (etcd://HOST:2379/PREFIX?cert=FILE&key=FILE&ca=FILE)", k)
		}
		if len(v) != 1 || v[0] == "" {
			return nil, fmt.Errorf("directory: etcd URL: give %s once, with a file", k)
		}
		files[k] = v[0]
	}
	if len(files) == 0 {
		return nil, nil
	}
	return LoadTLS(files["cert"], files["key"], files["ca"])
}

// diagnoseTLS says why an etcd at endpoint (http://HOST:PORT or
// https://HOST:PORT) that did not answer may have refused a client with
// TLS configuration c (nil: no TLS), or "" when TLS is not why: the etcd
// client reports a refused handshake only as a timeout (err, the client's
// error, is one: anything else, etcd answered). It dials once, for at
// most a second.
func diagnoseTLS(ctx context.Context, endpoint string, c *tls.Config, err error) string {
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		return ""
	}
	_, host, _ := strings.Cut(endpoint, "://")
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if c == nil {
		// Does it speak TLS? Then it is not the client's certificate
		// alone that is missing.
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} // only to tell whether it speaks TLS
		conn, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			return ""
		}
		conn.Close()
		return "it speaks TLS, and this client does not: give the directory's TLS files (directory_tls_ca, and directory_tls_cert and directory_tls_key where etcd requires client certificates, or ?ca=&cert=&key= in the URL)"
	}
	cfg := c.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	switch {
	case errors.As(err, &uerr), errors.As(err, &herr):
		return fmt.Sprintf("its certificate does not verify: %v: give the CA that signed it (directory_tls_ca, or ?ca= in the URL)", err)
	case err != nil:
		var alert tls.AlertError
		if errors.As(err, &alert) {
			return clientCertHint(c, err)
		}
		return ""
	}
	defer conn.Close()
	// In TLS 1.3 a server refuses the client's certificate after the
	// client's side of the handshake is done: its alert is the first
	// thing to read. A server that took the certificate waits for the
	// client to speak.
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		var alert tls.AlertError
		if errors.As(err, &alert) || strings.Contains(err.Error(), "remote error") {
			return clientCertHint(c, err)
		}
	}
	return ""
}

func clientCertHint(c *tls.Config, err error) string {
	if len(c.Certificates) == 0 && c.GetClientCertificate == nil {
		return fmt.Sprintf("the TLS handshake: %v: this etcd requires a client certificate: give directory_tls_cert and directory_tls_key (or ?cert=&key= in the URL)", err)
	}
	return fmt.Sprintf("the TLS handshake: %v: this etcd refused the client certificate: it wants one that its CA (--trusted-ca-file) signed", err)
}

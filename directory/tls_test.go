package directory

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// TestEtcdClientCert: an etcd that serves TLS and requires client
// certificates (--client-cert-auth) serves a client with a certificate its
// CA signed, named in the options or in the URL; it refuses one without a
// certificate, one whose certificate another CA signed, and one that does
// not speak TLS, and one that cannot verify the server's certificate, each
// with an error that says what is missing.
func TestEtcdClientCert(t *testing.T) {
	dir := t.TempDir()
	etcdtest.WritePKI(t, dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	host := etcdtest.StartTLS(t, transport.TLSInfo{CertFile: f("server.pem"), KeyFile: f("server-key.pem"),
		TrustedCAFile: f("ca.pem"), ClientCertAuth: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	good, err := LoadTLS(f("client.pem"), f("client-key.pem"), f("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	query := "?" + url.Values{"cert": {f("client.pem")}, "key": {f("client-key.pem")}, "ca": {f("ca.pem")}}.Encode()
	for name, open := range map[string]func() (Directory, error){
		"options": func() (Directory, error) { return Open(ctx, "etcd://"+host+"/xfer", Options{TLS: good}) },
		"url":     func() (Directory, error) { return Open(ctx, "etcd://"+host+"/xfer"+query, Options{}) },
	} {
		d, err := open()
		if err != nil {
			t.Fatalf("%s: a client with the right certificate: %v", name, err)
		}
		if err := d.Register(ctx, entry("node-"+name, "10.0.0.1:1")); err != nil {
			t.Fatalf("%s: register: %v", name, err)
		}
		if e, err := d.Lookup(ctx, "node-"+name); err != nil || e.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("%s: lookup: %+v %v", name, e, err)
		}
		d.Close()
	}

	caOnly, err := LoadTLS("", "", f("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := LoadTLS(f("rogue.pem"), f("rogue-key.pem"), f("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	noCA, err := LoadTLS(f("client.pem"), f("client-key.pem"), "")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		o    Options
		want string
	}{
		"no CA":          {Options{TLS: noCA, DialTimeout: 2 * time.Second}, "directory_tls_ca"},
		"no certificate": {Options{TLS: caOnly, DialTimeout: 2 * time.Second}, "client certificate"},
		"another CA's":   {Options{TLS: rogue, DialTimeout: 2 * time.Second}, "client certificate"},
		"no TLS":         {Options{DialTimeout: 2 * time.Second}, "TLS"},
	} {
		d, err := Open(ctx, "etcd://"+host+"/xfer", c.o)
		if err == nil {
			d.Close()
			t.Errorf("%s: opened an etcd that requires a client certificate", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error that says %q", name, err, c.want)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestLoadTLSErrors: TLS files that cannot work are refused with an error
// that names them, before anything is dialed.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	etcdtest.WritePKI(t, dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	for name, c := range map[string]struct {
		url  string
		want string
	}{
		"cert without key": {"etcd://127.0.0.1:1/x?cert=" + f("client.pem"), "both"},
		"missing file":     {"etcd://127.0.0.1:1/x?cert=" + f("none.pem") + "&key=" + f("client-key.pem"), "none.pem"},
		"CA not PEM":       {"etcd://127.0.0.1:1/x?ca=" + f("client-key.pem"), "no PEM certificate"},
		"unknown param":    {"etcd://127.0.0.1:1/x?certfile=a", "unknown parameter"},
		"twice":            {"etcd://127.0.0.1:1/x?ca=a&ca=b", "once"},
	} {
		d, err := Open(context.Background(), c.url, Options{DialTimeout: time.Second})
		if err == nil {
			d.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q in it", name, err, c.want)
		}
	}
}

// FuzzTLSQuery feeds arbitrary queries of an etcd URL to its decoder: it
// never panics, and what it accepts names only cert, key and ca.
func FuzzTLSQuery(f *testing.F) {
	for _, s := range []string{"", "cert=a&key=b&ca=c", "ca=", "ca=a&ca=b", "x=1", "%zz", "cert=a;key=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := tlsFromQuery(raw)
		if err != nil {
			return
		}
		q, _ := url.ParseQuery(raw)
		for k := range q {
			if k != "cert" && k != "key" && k != "ca" {
				t.Fatalf("query %q accepted with parameter %q (%v)", raw, k, c)
			}
		}
	})
}

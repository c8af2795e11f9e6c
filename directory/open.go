package directory

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Open returns the directory that rawURL names: "p2p" or "" (none),
// "http://HOST:PORT" (a coordinator) or "etcd://HOST:PORT[,HOST:PORT...]/PREFIX".
// An etcd URL may carry a user and password (etcd://USER:PASSWORD@HOST...)
// and name the PEM files of a client certificate and a CA
// (...?cert=FILE&key=FILE&ca=FILE, as LoadTLS takes them), which make the
// client speak TLS.
func Open(ctx context.Context, rawURL string, o Options) (Directory, error) {
	o = o.withDefaults()
	if rawURL == "" || rawURL == "p2p" {
		return p2p{}, nil
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("directory %q: want p2p, http://HOST:PORT or etcd://HOST:2379/PREFIX", rawURL)
	}
	switch scheme {
	case "http", "https":
		u, err := url.Parse(rawURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("directory %q: want http://HOST:PORT", rawURL)
		}
		return openHTTP(u, o), nil
	case "etcd":
		rest, query, _ := strings.Cut(rest, "?")
		if query != "" {
			if o.TLS != nil {
				return nil, errors.New("directory: etcd URL: TLS files in the URL and TLS in the options (directory_tls_*): give one")
			}
			var err error
			if o.TLS, err = tlsFromQuery(query); err != nil {
				return nil, err
			}
		}
		hosts, prefix, _ := strings.Cut(rest, "/")
		if user, h, ok := strings.Cut(hosts, "@"); ok {
			name, pass, _ := strings.Cut(user, ":")
			var err1, err2 error
			if o.Username, err1 = url.PathUnescape(name); err1 == nil {
				o.Password, err2 = url.PathUnescape(pass)
			}
			if err1 != nil || err2 != nil || o.Username == "" {
				return nil, fmt.Errorf("directory: etcd URL: bad user information: want etcd://USER:PASSWORD@HOST:2379/PREFIX")
			}
			hosts = h
		}
		if hosts == "" {
			return nil, fmt.Errorf("directory %q: no etcd endpoint: want etcd://HOST:2379[,HOST:2379...]/PREFIX", rawURL)
		}
		var eps []string
		for _, h := range strings.Split(hosts, ",") {
			if h == "" {
				return nil, fmt.Errorf("directory %q: an empty etcd endpoint", rawURL)
			}
			scheme := "http://"
			if o.TLS != nil {
				scheme = "https://"
			}
			eps = append(eps, scheme+h)
		}
		if prefix == "" {
			prefix = "xfer"
		}
		return openEtcd(ctx, eps, "/"+strings.Trim(prefix, "/"), o)
	}
	return nil, fmt.Errorf("directory %q: unknown scheme %q: want p2p, http or etcd", rawURL, scheme)
}

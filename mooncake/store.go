package mooncake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// P2PHandshake is the metadata_server value that names no server: peers
// are reached by their segment name, host:port.
const P2PHandshake = "P2PHANDSHAKE"

// Errors of the metadata client.
var (
	// ErrNotFound is a key the server does not hold.
	ErrNotFound = errors.New("mooncake metadata: key not found")
	// ErrUnsupported is a metadata server kind that Mooncake knows and
	// xfer does not serve (redis).
	ErrUnsupported = errors.New("mooncake metadata: server kind not supported")
)

// Kinds of metadata server, as ParseServer names them.
const (
	KindHTTP = "http"
	KindEtcd = "etcd"
)

// ServerAddr is a parsed metadata_server string.
type ServerAddr struct {
	Kind string // KindHTTP or KindEtcd
	// URL is the HTTP server's URL (http://HOST:PORT/metadata), to which
	// ?key=KEY is appended; empty for etcd.
	URL string
	// Endpoints are etcd's endpoints (HOST:PORT each); nil for HTTP.
	Endpoints []string
}

// ParseServer reads a Mooncake metadata_server string: http://... or
// https://... (the HTTP metadata server's URL), etcd://HOST:PORT[,HOST:PORT...],
// or a bare HOST:PORT[,...], which Mooncake reads as etcd's. P2PHANDSHAKE
// names no server and is an error here, as is redis:// (ErrUnsupported).
func ParseServer(s string) (ServerAddr, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return ServerAddr{}, errors.New("mooncake metadata: empty metadata server: want http://HOST:PORT/metadata, etcd://HOST:PORT or P2PHANDSHAKE")
	case s == P2PHandshake:
		return ServerAddr{}, errors.New("mooncake metadata: P2PHANDSHAKE names no metadata server")
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = KindEtcd, s
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return ServerAddr{}, fmt.Errorf("mooncake metadata: %q: want http://HOST:PORT/metadata (no query)", s)
		}
		return ServerAddr{Kind: KindHTTP, URL: s}, nil
	case KindEtcd:
		var eps []string
		for ep := range strings.SplitSeq(strings.TrimSuffix(rest, "/"), ",") {
			ep = strings.TrimSpace(ep)
			h, p, err := net.SplitHostPort(ep)
			if err != nil || h == "" || p == "" || strings.ContainsAny(ep, "/?# ") {
				return ServerAddr{}, fmt.Errorf("mooncake metadata: etcd endpoint %q in %q: want HOST:PORT", ep, s)
			}
			eps = append(eps, ep)
		}
		return ServerAddr{Kind: KindEtcd, Endpoints: eps}, nil
	case "redis":
		return ServerAddr{}, fmt.Errorf("mooncake metadata: %q: use an HTTP metadata server or etcd: %w", s, ErrUnsupported)
	}
	return ServerAddr{}, fmt.Errorf("mooncake metadata: %q: unknown kind %q: want http://HOST:PORT/metadata or etcd://HOST:PORT", s, scheme)
}

// StoreOptions configures OpenStore. The zero value is a client with
// Mooncake's timeouts and no token.
type StoreOptions struct {
	// Token is the HTTP server's bearer token (MC_METADATA_HTTP_TOKEN).
	// Default: none.
	Token string
	// Timeout bounds each call. Default: 3 seconds, as Mooncake's HTTP
	// client.
	Timeout time.Duration
}

// Store is a Mooncake metadata server's client.
type Store interface {
	// Get returns key's value, or an error matching ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Put sets key to value.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key; a key that is not set is not an error.
	Delete(ctx context.Context, key string) error
	// Close releases the client. Idempotent.
	Close() error
}

// OpenStore connects to the metadata server s (ParseServer's forms). An
// etcd is asked once, so that a wrong address fails here.
func OpenStore(ctx context.Context, s string, o StoreOptions) (Store, error) {
	a, err := ParseServer(s)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	if a.Kind == KindHTTP {
		return &httpStore{url: a.URL, o: o, c: &http.Client{Timeout: o.Timeout}}, nil
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   a.Endpoints,
		DialTimeout: o.Timeout,
		Context:     context.Background(),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("mooncake metadata: etcd %s: %w", strings.Join(a.Endpoints, ","), err)
	}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if _, err := cli.Get(cctx, "mooncake/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("mooncake metadata: etcd %s: %w", strings.Join(a.Endpoints, ","), err)
	}
	return &etcdStore{cli: cli, o: o, at: strings.Join(a.Endpoints, ",")}, nil
}

// httpStore speaks Mooncake's HTTP metadata protocol.
type httpStore struct {
	url string
	o   StoreOptions
	c   *http.Client
}

func (h *httpStore) do(ctx context.Context, method, key string, body []byte) (int, []byte, error) {
	if key == "" {
		return 0, nil, errors.New("mooncake metadata: empty key")
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	u := h.url + "?key=" + url.QueryEscape(key)
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("mooncake metadata: %s %s: %w", method, u, err)
	}
	if h.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.o.Token)
	}
	resp, err := h.c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("mooncake metadata: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, DefaultMaxValueBytes+1))
	if err != nil {
		return 0, nil, fmt.Errorf("mooncake metadata: %s %s: reading the answer: %w", method, u, err)
	}
	return resp.StatusCode, b, nil
}

func answer(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strings.ToValidUTF8(string(b), "?")
}

func (h *httpStore) Get(ctx context.Context, key string) ([]byte, error) {
	code, b, err := h.do(ctx, http.MethodGet, key, nil)
	switch {
	case err != nil:
		return nil, err
	case code == http.StatusNotFound:
		return nil, fmt.Errorf("mooncake metadata: %s at %s: %w", key, h.url, ErrNotFound)
	case code != http.StatusOK:
		return nil, fmt.Errorf("mooncake metadata: GET %s at %s: %d %s", key, h.url, code, answer(b))
	}
	return b, nil
}

func (h *httpStore) Put(ctx context.Context, key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	code, b, err := h.do(ctx, http.MethodPut, key, value)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("mooncake metadata: PUT %s at %s: %d %s", key, h.url, code, answer(b))
	}
	return nil
}

func (h *httpStore) Delete(ctx context.Context, key string) error {
	code, b, err := h.do(ctx, http.MethodDelete, key, nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK && code != http.StatusNotFound {
		return fmt.Errorf("mooncake metadata: DELETE %s at %s: %d %s", key, h.url, code, answer(b))
	}
	return nil
}

func (h *httpStore) Close() error { h.c.CloseIdleConnections(); return nil }

// etcdStore keeps keys in etcd as Mooncake's etcd plugin does: each value
// at its key, with no prefix of xfer's.
type etcdStore struct {
	cli *clientv3.Client
	o   StoreOptions
	at  string
}

func (e *etcdStore) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.o.Timeout)
}

func (e *etcdStore) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	r, err := e.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("mooncake metadata: get %s from etcd %s: %w", key, e.at, err)
	}
	if len(r.Kvs) == 0 {
		return nil, fmt.Errorf("mooncake metadata: %s in etcd %s: %w", key, e.at, ErrNotFound)
	}
	return r.Kvs[0].Value, nil
}

func (e *etcdStore) Put(ctx context.Context, key string, value []byte) error {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	if _, err := e.cli.Put(ctx, key, string(value)); err != nil {
		return fmt.Errorf("mooncake metadata: put %s in etcd %s: %w", key, e.at, err)
	}
	return nil
}

func (e *etcdStore) Delete(ctx context.Context, key string) error {
	ctx, cancel := e.bound(ctx)
	defer cancel()
	if _, err := e.cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("mooncake metadata: delete %s from etcd %s: %w", key, e.at, err)
	}
	return nil
}

func (e *etcdStore) Close() error { return e.cli.Close() }

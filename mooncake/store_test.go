package mooncake

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

func TestParseServer(t *testing.T) {
	for _, tc := range []struct {
		in, kind, url string
		eps           []string
		err           string
	}{
		{in: "http://127.0.0.1:8080/metadata", kind: KindHTTP, url: "http://127.0.0.1:8080/metadata"},
		{in: "https://meta.example:443/metadata", kind: KindHTTP, url: "https://meta.example:443/metadata"},
		{in: "etcd://10.0.0.1:2379", kind: KindEtcd, eps: []string{"10.0.0.1:2379"}},
		{in: "etcd://a:2379,b:2379/", kind: KindEtcd, eps: []string{"a:2379", "b:2379"}},
		{in: "127.0.0.1:2379", kind: KindEtcd, eps: []string{"127.0.0.1:2379"}},
		{in: "", err: "empty metadata server"},
		{in: "P2PHANDSHAKE", err: "names no metadata server"},
		{in: "redis://h:6379", err: "not supported"},
		{in: "ftp://h:1", err: "unknown kind"},
		{in: "http:///metadata", err: "want http://HOST:PORT/metadata"},
		{in: "http://h:1/metadata?key=x", err: "no query"},
		{in: "etcd://h", err: "want HOST:PORT"},
		{in: "etcd://h:1/prefix", err: "want HOST:PORT"},
		{in: "localhost", err: "want HOST:PORT"},
	} {
		a, err := ParseServer(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseServer(%q): %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || a.Kind != tc.kind || a.URL != tc.url || strings.Join(a.Endpoints, ",") != strings.Join(tc.eps, ",") {
			t.Errorf("ParseServer(%q) = %+v, %v", tc.in, a, err)
		}
	}
	if _, err := ParseServer("redis://h:1"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("redis: %v, want ErrUnsupported", err)
	}
}

func TestParseRPCMeta(t *testing.T) {
	m, err := ParseRPCMeta([]byte(`{"ip_or_host_name":"10.0.0.2","rpc_port":12345,"barex_port":0}`))
	if err != nil || m != (RPCMeta{"10.0.0.2", 12345}) || m.Addr() != "10.0.0.2:12345" {
		t.Fatalf("%+v, %v", m, err)
	}
	if m, err := ParseRPCMeta([]byte(`{"ip_or_host_name":"fe80::1","rpc_port":1}`)); err != nil || m.Addr() != "[fe80::1]:1" {
		t.Fatalf("IPv6: %+v, %v", m, err)
	}
	for _, bad := range []string{``, `null`, `[]`, `{}`, `{"ip_or_host_name":"h"}`, `{"ip_or_host_name":"h","rpc_port":0}`,
		`{"ip_or_host_name":"h","rpc_port":65536}`, `{"ip_or_host_name":"","rpc_port":1}`, `{"ip_or_host_name":"a b","rpc_port":1}`,
		`{"ip_or_host_name":"h","rpc_port":"1"}`, `{"ip_or_host_name":"h","rpc_port":1} {}`, `{"ip_or_host_name":"[h]","rpc_port":1}`} {
		if _, err := ParseRPCMeta([]byte(bad)); err == nil {
			t.Errorf("ParseRPCMeta(%s): no error", bad)
		}
	}
}

// exercise publishes, resolves and deletes through s.
func exercise(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := ResolveRPCMeta(ctx, s, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unpublished segment: %v, want ErrNotFound", err)
	}
	m := RPCMeta{Host: "127.0.0.1", Port: 4242}
	if err := PublishRPCMeta(ctx, s, "prefill-0", m); err != nil {
		t.Fatal(err)
	}
	if err := PublishRPCMeta(ctx, s, "prefill-0", m); err != nil {
		t.Fatalf("publishing the same value again: %v", err)
	}
	got, err := ResolveRPCMeta(ctx, s, "prefill-0")
	if err != nil || got != m {
		t.Fatalf("resolve: %+v, %v", got, err)
	}
	if err := s.Put(ctx, RPCMetaKey("garbage"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveRPCMeta(ctx, s, "garbage"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("a malformed entry: %v", err)
	}
	if err := s.Delete(ctx, RPCMetaKey("prefill-0")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, RPCMetaKey("prefill-0")); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	if _, err := s.Get(ctx, RPCMetaKey("prefill-0")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := PublishRPCMeta(ctx, s, "", m); err == nil {
		t.Fatal("an empty segment name was published")
	}
}

func TestHTTPStore(t *testing.T) {
	_, base := serve(t, ServerOptions{})
	s, err := OpenStore(context.Background(), base+MetadataPath, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exercise(t, s)
	// Mooncake's server keeps an rpc_meta entry until it is deleted.
	ctx := context.Background()
	if err := PublishRPCMeta(ctx, s, "x", RPCMeta{"h", 1}); err != nil {
		t.Fatal(err)
	}
	err = PublishRPCMeta(ctx, s, "x", RPCMeta{"h", 2})
	if err == nil || !strings.Contains(err.Error(), "Duplicate rpc_meta") || !strings.Contains(err.Error(), "another engine") {
		t.Fatalf("a second engine under the same name: %v", err)
	}
}

func TestHTTPStoreToken(t *testing.T) {
	_, base := serve(t, ServerOptions{Token: "tok"})
	ctx := context.Background()
	bad, err := OpenStore(ctx, base+MetadataPath, StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Put(ctx, "k", []byte("v")); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v", err)
	}
	good, err := OpenStore(ctx, base+MetadataPath, StoreOptions{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	exercise(t, good)
}

func TestHTTPStoreDown(t *testing.T) {
	s, err := OpenStore(context.Background(), "http://127.0.0.1:1/metadata", StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(context.Background(), "k"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("a server that is down: %v", err)
	}
}

func TestEtcdStore(t *testing.T) {
	host := etcdtest.Start(t)
	for _, conn := range []string{"etcd://" + host, host} {
		s, err := OpenStore(context.Background(), conn, StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	port := etcdtest.FreePort(t)
	if _, err := OpenStore(context.Background(), "127.0.0.1:"+itoa(port), StoreOptions{Timeout: 300e6}); err == nil {
		t.Fatal("an etcd that is not there: no error")
	}
}

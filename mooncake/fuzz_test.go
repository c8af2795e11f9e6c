package mooncake

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
)

func itoa(n int) string { return strconv.Itoa(n) }

func FuzzParseRPCMeta(f *testing.F) {
	f.Add([]byte(`{"ip_or_host_name":"10.0.0.2","rpc_port":12345}`))
	f.Add([]byte(`{"ip_or_host_name":"fe80::1","rpc_port":1,"barex_port":7}`))
	f.Add([]byte(`{"rpc_port":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseRPCMeta(b)
		if err != nil {
			return
		}
		enc, err := m.Marshal()
		if err != nil {
			t.Fatalf("accepted %+v but cannot encode it: %v", m, err)
		}
		if back, err := ParseRPCMeta(enc); err != nil || back != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, back, err)
		}
	})
}

func FuzzParseServer(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8080/metadata", "etcd://a:1,b:2", "127.0.0.1:2379", "P2PHANDSHAKE", "redis://x:1", "http://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseServer(s)
		if err != nil {
			return
		}
		switch a.Kind {
		case KindHTTP:
			if a.URL == "" || a.Endpoints != nil {
				t.Fatalf("%q: %+v", s, a)
			}
		case KindEtcd:
			if a.URL != "" || len(a.Endpoints) == 0 {
				t.Fatalf("%q: %+v", s, a)
			}
		default:
			t.Fatalf("%q: kind %q", s, a.Kind)
		}
	})
}

// FuzzServer sends the server what a client might: any method, any key,
// any body, a PUT then a GET; it must answer each and return what was PUT.
func FuzzServer(f *testing.F) {
	f.Add("PUT", "mooncake/rpc_meta/a", []byte(`{"rpc_port":1}`))
	f.Add("DELETE", " ", []byte{})
	f.Add("GET", "k\x00", []byte("x"))
	s := NewServer(ServerOptions{MaxKeys: 64, MaxTotalBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, method, key string, body []byte) {
		if len(method) == 0 || len(method) > 16 {
			return
		}
		target := MetadataPath + "?key=" + url.QueryEscape(key)
		req, err := http.NewRequest(method, target, bytes.NewReader(body))
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code == 0 {
			t.Fatal("no answer")
		}
		if method == http.MethodPut && w.Code == http.StatusOK {
			g := httptest.NewRecorder()
			s.ServeHTTP(g, httptest.NewRequest(http.MethodGet, target, nil))
			if g.Code != http.StatusOK || !bytes.Equal(g.Body.Bytes(), body) && w.Body.String() == "metadata updated" {
				t.Fatalf("PUT %q then GET: %d %q", key, g.Code, g.Body.String())
			}
		}
	})
}

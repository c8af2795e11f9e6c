package mooncake

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
)

// call sends one request to the server at base and returns its status,
// body and content type.
func call(t *testing.T, base, method, rawQuery, body string, header ...string) (int, string, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+MetadataPath+rawQuery, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	code, h, b := testutil.HTTPDo(t, req)
	return code, string(b), h.Get("Content-Type")
}

func serve(t *testing.T, o ServerOptions) (*Server, string) {
	s := NewServer(o)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return s, hs.URL
}

// TestServerProtocol walks Mooncake's protocol over loopback TCP: each
// method's status codes and bodies, rpc_meta's write-once rule, keys that
// need escaping.
func TestServerProtocol(t *testing.T) {
	s, base := serve(t, ServerOptions{})
	q := func(key string) string { return "?key=" + url.QueryEscape(key) }
	steps := []struct {
		method, query, body string
		code                int
		want                string
	}{
		{"GET", "", "", 400, "metadata key is required"},
		{"GET", "?key=%20%20", "", 400, "metadata key is required"},
		{"PUT", "?other=1", "x", 400, "metadata key is required"},
		{"GET", q("mooncake/ram/a"), "", 404, "metadata not found"},
		{"DELETE", q("mooncake/ram/a"), "", 404, "metadata not found"},
		{"PUT", q("mooncake/ram/a"), `{"buffers":[]}`, 200, "metadata updated"},
		{"GET", q("mooncake/ram/a"), "", 200, `{"buffers":[]}`},
		{"GET", q(" mooncake/ram/a "), "", 200, `{"buffers":[]}`}, // trimmed, as Mooncake's
		{"PUT", q("mooncake/ram/a"), `{"buffers":[1]}`, 200, "metadata updated"},
		{"GET", q("mooncake/ram/a"), "", 200, `{"buffers":[1]}`},
		{"PUT", q("mooncake/rpc_meta/h:1"), `{"rpc_port":1}`, 200, "metadata updated"},
		{"PUT", q("mooncake/rpc_meta/h:1"), `{"rpc_port":1}`, 200, "metadata unchanged"},
		{"PUT", q("mooncake/rpc_meta/h:1"), `{"rpc_port":2}`, 400, "Duplicate rpc_meta key not allowed"},
		{"GET", q("mooncake/rpc_meta/h:1"), "", 200, `{"rpc_port":1}`},
		{"DELETE", q("mooncake/rpc_meta/h:1"), "", 200, "metadata deleted"},
		{"PUT", q("mooncake/rpc_meta/h:1"), `{"rpc_port":2}`, 200, "metadata updated"},
		{"PUT", q("k&=?/ü"), "v", 200, "metadata updated"},
		{"GET", q("k&=?/ü"), "", 200, "v"},
		{"PUT", q("empty"), "", 200, "metadata updated"},
		{"GET", q("empty"), "", 200, ""},
		{"POST", q("mooncake/ram/a"), "x", 405, "Method not allowed"},
		{"PATCH", q("mooncake/ram/a"), "x", 405, "Method not allowed"},
	}
	for i, st := range steps {
		code, body, ctype := call(t, base, st.method, st.query, st.body)
		if code != st.code || body != st.want {
			t.Errorf("step %d: %s %s %q: got %d %q, want %d %q", i, st.method, st.query, st.body, code, body, st.code, st.want)
		}
		if ctype != "application/json" {
			t.Errorf("step %d: Content-Type %q, want application/json (as Mooncake's)", i, ctype)
		}
	}
	if n := s.Len(); n != 4 {
		t.Errorf("Len %d, want 4", n)
	}
	resp, err := http.Get(base + "/other?key=a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("another path: %d, want 404", resp.StatusCode)
	}
}

// TestServerToken checks MC_METADATA_HTTP_TOKEN's rule: every request
// without the bearer token is refused with 401 and changes nothing.
func TestServerToken(t *testing.T) {
	s, base := serve(t, ServerOptions{Token: "s3cret-token"})
	for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "Basic s3cret-token"}, {"Authorization", "Bearer"}} {
		if code, body, _ := call(t, base, "PUT", "?key=k", "v", h...); code != 401 || body != "unauthorized" {
			t.Errorf("PUT with %q: %d %q, want 401 unauthorized", h, code, body)
		}
	}
	if s.Len() != 0 {
		t.Fatal("a refused PUT stored its key")
	}
	if code, _, _ := call(t, base, "PUT", "?key=k", "v", "Authorization", "Bearer s3cret-token"); code != 200 {
		t.Fatalf("PUT with the token: %d", code)
	}
	if code, body, _ := call(t, base, "GET", "?key=k", "", "authorization", "bearer s3cret-token"); code != 200 || body != "v" {
		t.Fatalf("GET with the token: %d %q", code, body)
	}
	if code, _, _ := call(t, base, "GET", "?key=k", ""); code != 401 {
		t.Fatalf("GET without the token: %d", code)
	}
}

// TestServerBudgets checks the bounds on keys, total bytes and one value.
func TestServerBudgets(t *testing.T) {
	_, base := serve(t, ServerOptions{MaxKeys: 2, MaxTotalBytes: 10, MaxValueBytes: 8})
	for _, st := range []struct {
		key, body string
		code      int
		want      string
	}{
		{"a", "12345", 200, "metadata updated"},
		{"b", "1234", 200, "metadata updated"},
		{"c", "1", 507, "metadata key budget exhausted"},
		{"a", "1234567", 507, "metadata size budget exhausted"},
		{"a", "123456", 200, "metadata updated"}, // 6+4: within 10
		{"b", "123456789", 413, "metadata value too large"},
	} {
		if code, body, _ := call(t, base, "PUT", "?key="+st.key, st.body); code != st.code || body != st.want {
			t.Errorf("PUT %s %q: %d %q, want %d %q", st.key, st.body, code, body, st.code, st.want)
		}
	}
	if code, _, _ := call(t, base, "DELETE", "?key=b", ""); code != 200 {
		t.Fatal("delete")
	}
	if code, _, _ := call(t, base, "PUT", "?key=c", "1234"); code != 200 {
		t.Fatalf("PUT after a delete freed room: %d", code)
	}
}

package directory

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestMalformedCoordinator: a server that answers what a coordinator never
// would (not JSON, another node's entry, a malformed entry in a list) gets
// errors that match ErrInvalid, and a list skips only the bad entries.
func TestMalformedCoordinator(t *testing.T) {
	answers := map[string]string{
		"/nodes/garbage/rdma/endpoint": `<html>not json</html>`,
		"/nodes/other/rdma/endpoint":   `{"node_id":"someone-else","addrs":["h:1"]}`,
		"/nodes/badaddr/rdma/endpoint": `{"node_id":"badaddr","addrs":["no-port"]}`,
		"/nodes":                       `{"nodes":[{"node_id":"ok","addrs":["h:1"]},{"node_id":"bad"},7,"x"]}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(answers[r.URL.Path]))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Open(ctx, srv.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, id := range []string{"garbage", "other", "badaddr"} {
		if _, err := d.Lookup(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("lookup %s: %v, want ErrInvalid", id, err)
		}
	}
	es, err := d.List(ctx)
	if err != nil || len(es) != 1 || es[0].NodeID != "ok" {
		t.Errorf("list: %+v, %v; want the one good entry", es, err)
	}
	answers["/nodes"] = `[1,2,3]`
	if _, err := d.List(ctx); !errors.Is(err, ErrInvalid) {
		t.Errorf("list of a non-object: %v, want ErrInvalid", err)
	}
}

// FuzzDecodeList: any answer to GET /nodes is a list of entries that check,
// or an ErrInvalid; never a panic.
func FuzzDecodeList(f *testing.F) {
	f.Add([]byte(`{"nodes":[{"node_id":"a","addrs":["h:1"],"services":{"kv":"h:2"}}]}`))
	f.Add([]byte(`{"nodes":[{"node_id":"bad"},null,7]}`))
	f.Add([]byte(`{"nodes":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		skipped := 0
		es, _, err := decodeList(bytes.NewReader(b), func(err error) {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("skipped for %v, which does not match ErrInvalid", err)
			}
			skipped++
		})
		if err != nil {
			if !errors.Is(err, ErrInvalid) || es != nil {
				t.Fatalf("%v (entries %v): want ErrInvalid and none", err, es)
			}
			return
		}
		for _, e := range es {
			if err := e.Check(); err != nil {
				t.Fatalf("a listed entry does not check: %v", err)
			}
			if strings.TrimSpace(e.NodeID) == "" {
				t.Fatal("a listed entry has no node ID")
			}
		}
	})
}

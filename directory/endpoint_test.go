package directory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRDMAGuideCoordinator: what the RDMA guide's coordinator snippet does,
// against xfer's coordinator: POST a bare endpoint to a numeric node ID,
// GET it back with the fields at the top level.
func TestRDMAGuideCoordinator(t *testing.T) {
	c := NewCoordinator(CoordinatorOptions{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	do := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, tc := range []struct{ id, body string }{
		{"7", `{"qpn": 4660, "lid": 3, "gid": "fe80::1", "psn": 77}`},
		{"8", `{"qpn":291,"lid":0,"gid":[254,128,0,0,0,0,0,0,0,0,0,0,0,0,0,2],"psn":5}`},
	} {
		code, b := do(http.MethodPost, "/nodes/"+tc.id+"/rdma/endpoint", tc.body)
		if code != http.StatusOK || !bytes.Contains(b, []byte(`"status":"registered"`)) {
			t.Fatalf("POST %s: %d %s", tc.id, code, b)
		}
		code, b = do(http.MethodGet, "/nodes/"+tc.id+"/rdma/endpoint", "")
		var got, want map[string]any
		json.Unmarshal(b, &got)
		json.Unmarshal([]byte(tc.body), &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if code != http.StatusOK || !bytes.Equal(gb, wb) {
			t.Fatalf("GET %s: %d %s, want %s", tc.id, code, b, wb)
		}
	}
	// Bare endpoints are not xfer entries: not listed, and an xfer lookup
	// says the entry is not one.
	ctx := context.Background()
	d := mustOpen(t, srv.URL, DefaultTTL)
	if es, err := d.List(ctx); err != nil || len(es) != 0 {
		t.Fatalf("list: %+v, %v; want no xfer entry", es, err)
	}
	if _, err := d.Lookup(ctx, "7"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("xfer lookup of a bare endpoint: %v, want ErrInvalid", err)
	}
	// An xfer entry with an endpoint: an xfer client gets its entry, the
	// guide's client its endpoint's fields at the top level.
	if err := d.Register(ctx, entry("9", "10.0.0.1:7471")); err != nil {
		t.Fatal(err)
	}
	e, err := d.Lookup(ctx, "9")
	if err != nil || e.RDMA == nil || e.RDMA.QPN != 0x1234 || e.Addrs[0] != "10.0.0.1:7471" {
		t.Fatalf("xfer lookup: %+v, %v", e, err)
	}
	_, b := do(http.MethodGet, "/nodes/9/rdma/endpoint", "")
	var ep struct {
		QPN *uint32 `json:"qpn"`
		LID *uint16 `json:"lid"`
		GID *string `json:"gid"`
		PSN *uint32 `json:"psn"`
	}
	if json.Unmarshal(b, &ep); ep.QPN == nil || *ep.QPN != 0x1234 || ep.LID == nil || ep.GID == nil || *ep.GID != "::ffff:10.0.0.1" || ep.PSN == nil || *ep.PSN != 77 {
		t.Fatalf("the guide's view of an xfer entry: %s", b)
	}
	// Malformed endpoints get a 400 and change nothing.
	for _, body := range []string{
		`{"qpn": 16777216, "gid": "fe80::1", "psn": 1}`,
		`{"qpn": 1, "lid": 0, "psn": 1}`,
		`{"qpn": 1, "gid": [1,2,3], "psn": 1}`,
		`{"qpn": "x"}`,
	} {
		if code, b := do(http.MethodPost, "/nodes/10/rdma/endpoint", body); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s, want 400", body, code, b)
		}
	}
	if n := c.Len(); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
}

// FuzzBareEndpoint: any body is an endpoint that checks, with an answer
// that decodes to it again, or an ErrInvalid; never a panic.
func FuzzBareEndpoint(f *testing.F) {
	f.Add([]byte(`{"qpn": 4660, "lid": 3, "gid": "fe80::1", "psn": 77}`))
	f.Add([]byte(`{"qpn":1,"gid":[254,128,0,0,0,0,0,0,0,0,0,0,0,0,0,2]}`))
	f.Add([]byte(`{"qpn":1,"gid":null,"lid":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ep, answer, err := decodeBareEndpoint("1", b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v: want ErrInvalid", err)
			}
			return
		}
		if err := ep.check("1"); err != nil {
			t.Fatalf("decoded an endpoint that does not check: %v", err)
		}
		again, _, err := decodeBareEndpoint("1", answer)
		if err != nil || again != ep {
			t.Fatalf("the answer %s decodes to %+v, %v; want %+v", answer, again, err, ep)
		}
	})
}

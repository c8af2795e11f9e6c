package directory

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// listRev lists a coordinator at url with query q, and returns the status,
// the revision header and the nodes' IDs.
func listRev(t *testing.T, url, q string) (int, string, []string) {
	t.Helper()
	resp, err := http.Get(url + "/nodes" + q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Revision string  `json:"revision"`
		Nodes    []Entry `json:"nodes"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		if out.Revision != resp.Header.Get("X-Xfer-Revision") {
			t.Fatalf("revision %q in the body, %q in the header", out.Revision, resp.Header.Get("X-Xfer-Revision"))
		}
	}
	var ids []string
	for _, e := range out.Nodes {
		ids = append(ids, e.NodeID)
	}
	return resp.StatusCode, resp.Header.Get("X-Xfer-Revision"), ids
}

// The coordinator's long poll: unchanged, it answers 304 when the timeout
// ends; a registration, a removal or an expiry answers it at once with
// the new list; a bad timeout is refused.
func TestCoordinatorLongPoll(t *testing.T) {
	srv := httptest.NewServer(NewCoordinator(CoordinatorOptions{}))
	defer srv.Close()
	ctx := context.Background()
	a := mustOpen(t, srv.URL, 10*time.Second)
	if err := a.Register(ctx, entry("a", "10.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	code, rev, ids := listRev(t, srv.URL, "")
	if code != 200 || rev == "" || len(ids) != 1 {
		t.Fatalf("list: %d %q %v, want 200, a revision and node a", code, rev, ids)
	}
	if code, rev2, _ := listRev(t, srv.URL, "?wait="+rev+"&timeout=100ms"); code != http.StatusNotModified || rev2 != rev {
		t.Fatalf("unchanged long poll: %d %q, want 304 at %q", code, rev2, rev)
	}
	if code, _, _ := listRev(t, srv.URL, "?wait="+rev+"&timeout=2m"); code != http.StatusBadRequest {
		t.Fatalf("timeout of 2m: %d, want 400", code)
	}
	if code, _, _ := listRev(t, srv.URL, "?wait="+rev+"&timeout=later"); code != http.StatusBadRequest {
		t.Fatalf("timeout of later: %d, want 400", code)
	}
	// A registration answers a waiting poll at once.
	go func() {
		time.Sleep(100 * time.Millisecond)
		a.Register(ctx, entry("b", "10.0.0.2:1"))
	}()
	code, rev3, ids := listRev(t, srv.URL, "?wait="+rev+"&timeout=50s")
	if code != 200 || rev3 == rev || len(ids) != 2 {
		t.Fatalf("long poll across a registration: %d %q %v, want 200, a new revision and nodes a, b", code, rev3, ids)
	}
	// A refresh changes nothing: a second register of the same entry.
	if err := a.Register(ctx, entry("b", "10.0.0.2:1")); err != nil {
		t.Fatal(err)
	}
	if _, rev4, _ := listRev(t, srv.URL, ""); rev4 != rev3 {
		t.Fatalf("revision %q after a refresh, want %q", rev4, rev3)
	}
	// An expiry answers a waiting poll: node c, whose client stops
	// refreshing it (closed without deregistering is not possible, so
	// it is posted by hand with a short TTL).
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/nodes/c/rdma/endpoint?ttl=300ms", jsonBody(t, entry("c", "10.0.0.3:1")))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("post c: %v %v", resp, err)
	}
	_, rev5, ids := listRev(t, srv.URL, "")
	if len(ids) != 3 {
		t.Fatalf("nodes %v, want a, b, c", ids)
	}
	start := time.Now()
	code, _, ids = listRev(t, srv.URL, "?wait="+rev5+"&timeout=30s")
	if code != 200 || len(ids) != 2 {
		t.Fatalf("long poll across c's expiry: %d %v, want 200 and nodes a, b", code, ids)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the expiry answered the poll after %v, not when it expired", d)
	}
}

func jsonBody(t *testing.T, e Entry) io.Reader {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

// Follow on a coordinator: a change made before a sync comes before the
// sync's Synced; a restarted coordinator (a new epoch) is a Reset; and an
// idle watcher costs the coordinator no request while nothing changes.
func TestCoordinatorFollow(t *testing.T) {
	var cur atomic.Pointer[Coordinator]
	cur.Store(NewCoordinator(CoordinatorOptions{}))
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/nodes" {
			requests.Add(1)
		}
		cur.Load().ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := mustOpen(t, srv.URL, 10*time.Second)
	w := mustOpen(t, srv.URL, 10*time.Second)
	ch, sync := follow(t, ctx, w)
	if ev := next(t, ch, 10*time.Second); ev.Kind != Synced {
		t.Fatalf("first event %v, want Synced (the list was empty)", ev.Kind)
	}
	syncOrder(t, ctx, a, ch, sync)

	// Idle: the watch's long poll waits; no list is asked for meanwhile
	// (the registrations' heartbeats go on).
	time.Sleep(500 * time.Millisecond)
	before := requests.Load()
	time.Sleep(3 * time.Second)
	if n := requests.Load() - before; n > 1 {
		t.Fatalf("%d lists in 3 s from an idle watcher, want at most 1", n)
	}

	// A restart: the new coordinator knows nothing of the old entries.
	cur.Store(NewCoordinator(CoordinatorOptions{}))
	if err := a.Register(ctx, entry("after", "10.0.0.9:1")); err != nil {
		t.Fatal(err)
	}
	got := syncedAfter(t, ch, sync, 20*time.Second)
	if got["(reset)"] != Reset || got["after"] != Join {
		t.Fatalf("after a restart: %v, want a reset and after's join", got)
	}
}

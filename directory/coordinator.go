package directory

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xferio/xfer/internal/auth"
)

// The coordinator's HTTP API (JSON bodies; errors are {"error": "..."}):
//
//	POST   /nodes/{id}/rdma/endpoint   register (201) or refresh (204) an entry; ?ttl=10s&incarnation=X
//	GET    /nodes/{id}/rdma/endpoint   the entry, or 404
//	GET    /nodes                      {"revision": "R", "nodes": [entry, ...]}, sorted by node ID
//	GET    /nodes?wait=R&timeout=30s   the same once the list is no longer at revision R (a long
//	                                   poll, at most 60s); 304 if it still is when the timeout ends
//	DELETE /nodes/{id}                 remove an entry (?incarnation=X: only that one's), or 404
//	GET    /healthz                    200 "ok"
//
// With a token (CoordinatorOptions.Token), POST and DELETE need the header
// "Authorization: Bearer TOKEN", and the GETs of entries too with
// ProtectReads; others get 401 and change nothing. /healthz stays open.
//
// The path keeps the shape of the coordinators RDMA deployments already
// run, where a node posts its endpoint (QPN, LID, GID, PSN) for its peers;
// the RDMA guide's bare endpoint body is accepted too (endpoint.go).
//
// An incarnation is a random ID a client picks when it registers a node.
// A live entry created with one is refreshed, replaced or removed only by
// a request with the same one: another gets 409 and the holder's
// addresses ({"error": ..., "holder": [...]}). That is how one node owns
// its ID, and how a node that lost its entry never removes a later
// incarnation's.
//
// A revision names a state of the list: "EPOCH-N", where EPOCH is random
// to each run of the coordinator and N counts the changes of the listed
// entries (a registration, an entry that changed, a removal, an expiry).
// A watcher long-polls with the revision it has, so an idle cluster costs
// one request per watcher per timeout; each list is encoded once per
// revision however many ask for it. A revision of another epoch means the
// coordinator restarted, and entries may have come and gone unseen.

// Bounds of the TTL a node may ask for.
const (
	MinTTL = 100 * time.Millisecond
	MaxTTL = 10 * time.Minute
)

// Coordinator is the http backend's server: it keeps entries in memory and
// forgets those not refreshed within their TTL. It is an http.Handler.
type Coordinator struct {
	ttl time.Duration
	log *slog.Logger
	mux *http.ServeMux
	now func() time.Time

	token        string
	protectReads bool
	onRefused    func(remote, reason string, err error)
	refused      atomic.Uint64
	warned       auth.Warnings

	epoch string // this run's part of each revision

	mu         sync.Mutex
	nodes      map[string]*record
	rev        uint64        // counts the changes of the listed entries
	changed    chan struct{} // closed at the next change
	body       []byte        // the list at rev, encoded; nil until asked for
	nextExpiry time.Time     // no entry expires before then
}

type record struct {
	entry   Entry
	raw     json.RawMessage // the entry, as listed
	answer  []byte          // what a GET answers
	bare    bool            // a bare endpoint (the RDMA guide's format), not listed
	inc     string          // the incarnation that created it, or ""
	expires time.Time
}

// maxIncarnation bounds an incarnation's length.
const maxIncarnation = 64

// CoordinatorOptions configure a Coordinator.
type CoordinatorOptions struct {
	// TTL is the TTL of an entry whose node asks for none. Default:
	// DefaultTTL.
	TTL time.Duration
	// Logger receives registrations, expiries and refused requests at
	// info, and requests refused for want of the token at Warn, once per
	// source and minute. Default: none.
	Logger *slog.Logger
	// Token, when set, is required (as a bearer token) of every request
	// that changes an entry: without it anyone who reaches the coordinator
	// can list, replace or remove any node's entry. Default: none.
	Token string
	// ProtectReads requires the token of the requests that read entries
	// too. Default: false (entries hold addresses, no secret).
	ProtectReads bool
	// OnRefused, when set, hears of every request refused for want of the
	// token: the caller's address, the reason (no_proof: no token;
	// bad_proof: another token) and why. Default: none.
	OnRefused func(remote, reason string, err error)
}

// NewCoordinator returns a coordinator with no entries.
func NewCoordinator(o CoordinatorOptions) *Coordinator {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var e [8]byte
	rand.Read(e[:])
	c := &Coordinator{ttl: o.TTL, log: o.Logger, mux: http.NewServeMux(), now: time.Now, nodes: map[string]*record{},
		token: o.Token, protectReads: o.ProtectReads, onRefused: o.OnRefused,
		epoch: hex.EncodeToString(e[:]), changed: make(chan struct{})}
	c.mux.HandleFunc("POST /nodes/{id}/rdma/endpoint", c.authorized(true, c.post))
	c.mux.HandleFunc("GET /nodes/{id}/rdma/endpoint", c.authorized(false, c.get))
	c.mux.HandleFunc("GET /nodes", c.authorized(false, c.list))
	c.mux.HandleFunc("DELETE /nodes/{id}", c.authorized(true, c.delete))
	c.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return c
}

// authorized wraps a handler with the token check: for writes always, for
// reads with ProtectReads; never without a token.
func (c *Coordinator) authorized(write bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.token == "" || !write && !c.protectReads {
			h(w, r)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		reason := "no_proof"
		if ok && got != "" {
			if auth.Equal([]byte(got), []byte(c.token)) {
				h(w, r)
				return
			}
			reason = "bad_proof"
		}
		err := errors.New("this coordinator requires its token: configure the directory token (directory_token_file)")
		if reason == "bad_proof" {
			err = errors.New("wrong directory token")
		}
		c.refuse(r.RemoteAddr, reason, err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="xfer coordinator"`)
		httpError(w, http.StatusUnauthorized, err)
	}
}

// refuse counts and reports a refused request, and logs it at Warn once
// per source and minute.
func (c *Coordinator) refuse(remote, reason string, err error) {
	c.refused.Add(1)
	if c.onRefused != nil {
		c.onRefused(remote, reason, err)
	}
	src := auth.Source(remote)
	if c.warned.Due(src, c.now()) {
		c.log.Warn("coordinator: refused a request without the token (logged once per source and minute)", "source", src, "reason", reason)
	}
}

// Refused is the number of requests refused for want of the token.
func (c *Coordinator) Refused() uint64 { return c.refused.Load() }

func (c *Coordinator) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// Len is the number of live entries.
func (c *Coordinator) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireLocked()
	return len(c.nodes)
}

// expireLocked forgets the entries whose TTL ran out: a scan of them all,
// but only once the earliest expiry has passed (a node refreshes its
// entry every third of its TTL, so that is about once in two thirds of a
// TTL, not at every request).
func (c *Coordinator) expireLocked() {
	now := c.now()
	if now.Before(c.nextExpiry) {
		return
	}
	var next time.Time
	for id, r := range c.nodes {
		if now.After(r.expires) {
			c.log.Info("coordinator: entry expired", "node", id)
			c.removeLocked(id, r)
			continue
		}
		if next.IsZero() || r.expires.Before(next) {
			next = r.expires
		}
	}
	c.nextExpiry = next
}

// removeLocked forgets node id's entry r.
func (c *Coordinator) removeLocked(id string, r *record) {
	delete(c.nodes, id)
	if !r.bare {
		c.changedLocked()
	}
}

// changedLocked moves the revision on and wakes the long polls.
func (c *Coordinator) changedLocked() {
	c.rev++
	c.body = nil
	close(c.changed)
	c.changed = make(chan struct{})
}

// revisionLocked is the list's revision.
func (c *Coordinator) revisionLocked() string { return c.epoch + "-" + strconv.FormatUint(c.rev, 10) }

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

func (c *Coordinator) post(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := CheckNodeID(id); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	ttl := c.ttl
	if s := r.URL.Query().Get("ttl"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < MinTTL || d > MaxTTL {
			httpError(w, http.StatusBadRequest, fmt.Errorf("ttl %q: want a duration from %v to %v", s, MinTTL, MaxTTL))
			return
		}
		ttl = d
	}
	inc := r.URL.Query().Get("incarnation")
	if len(inc) > maxIncarnation {
		httpError(w, http.StatusBadRequest, fmt.Errorf("incarnation of %d bytes: at most %d", len(inc), maxIncarnation))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxEntrySize))
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("entry: %w", err))
		return
	}
	rec := &record{inc: inc, expires: c.now().Add(ttl)}
	if isBareEndpoint(body) {
		ep, answer, err := decodeBareEndpoint(id, body)
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		rec.entry, rec.answer, rec.bare = Entry{NodeID: id, RDMA: &ep}, answer, true
	} else {
		e, err := Unmarshal(body)
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		if e.NodeID != id {
			httpError(w, http.StatusBadRequest, fmt.Errorf("the entry is for node %q, the path for %q", e.NodeID, id))
			return
		}
		raw, err := e.Marshal()
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		rec.entry, rec.raw, rec.answer = e, raw, entryAnswer(e, raw)
	}
	c.mu.Lock()
	old := c.nodes[id]
	if old != nil && c.now().After(old.expires) {
		c.log.Info("coordinator: entry expired", "node", id)
		c.removeLocked(id, old)
		old = nil
	}
	if old != nil && old.inc != inc {
		holder := old.entry.Addrs
		c.mu.Unlock()
		c.log.Info("coordinator: refused a registration of a node ID another node holds", "node", id, "holder", strings.Join(holder, ","))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		json.NewEncoder(w).Encode(struct {
			Error  string   `json:"error"`
			Holder []string `json:"holder"`
		}{(&TakenError{NodeID: id, Holder: holder}).Error(), holder})
		return
	}
	c.nodes[id] = rec
	if !rec.bare && (old == nil || old.bare || !bytes.Equal(old.raw, rec.raw)) || rec.bare && old != nil && !old.bare {
		c.changedLocked()
	}
	if c.nextExpiry.IsZero() || rec.expires.Before(c.nextExpiry) {
		c.nextExpiry = rec.expires
	}
	c.mu.Unlock()
	switch {
	case rec.bare:
		// The RDMA guide's coordinator answers 200 and this.
		c.log.Info("coordinator: rdma endpoint registered", "node", id, "qpn", rec.entry.RDMA.QPN)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"registered"}`+"\n")
	case old == nil:
		c.log.Info("coordinator: node registered", "node", id, "addrs", strings.Join(rec.entry.Addrs, ","), "ttl", ttl)
		w.WriteHeader(http.StatusCreated)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (c *Coordinator) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c.mu.Lock()
	c.expireLocked()
	rec := c.nodes[id]
	c.mu.Unlock()
	if rec == nil {
		httpError(w, http.StatusNotFound, fmt.Errorf("node %q: %w", truncate(id), ErrNotFound))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(rec.answer)
}

// Bounds of a long poll's timeout.
const (
	DefaultPollTimeout = 30 * time.Second
	MaxPollTimeout     = 60 * time.Second
)

func (c *Coordinator) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, waiting := q.Get("wait"), q.Has("wait")
	timeout := DefaultPollTimeout
	if s := q.Get("timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxPollTimeout {
			httpError(w, http.StatusBadRequest, fmt.Errorf("timeout %q: want a duration from 0 to %v", s, MaxPollTimeout))
			return
		}
		timeout = d
	}
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	for {
		c.expireLocked()
		if !waiting || c.revisionLocked() != since || !time.Now().Before(deadline) {
			break
		}
		// Wait for a change, the earliest expiry, or the timeout.
		ch, wake := c.changed, time.Until(deadline)
		if !c.nextExpiry.IsZero() {
			wake = min(wake, c.nextExpiry.Sub(c.now())+time.Millisecond)
		}
		c.mu.Unlock()
		t := time.NewTimer(max(wake, 0))
		select {
		case <-ch:
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
		c.mu.Lock()
	}
	rev := c.revisionLocked()
	if waiting && rev == since {
		c.mu.Unlock()
		w.Header().Set("X-Xfer-Revision", rev)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if c.body == nil {
		ids := make([]string, 0, len(c.nodes))
		for id, rec := range c.nodes {
			if !rec.bare {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		out := struct {
			Revision string            `json:"revision"`
			Nodes    []json.RawMessage `json:"nodes"`
		}{Revision: rev, Nodes: make([]json.RawMessage, 0, len(ids))}
		for _, id := range ids {
			out.Nodes = append(out.Nodes, c.nodes[id].raw)
		}
		c.body, _ = json.Marshal(out)
		c.body = append(c.body, '\n')
	}
	body := c.body
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Xfer-Revision", rev)
	w.Write(body)
}

func (c *Coordinator) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	inc := r.URL.Query().Get("incarnation")
	c.mu.Lock()
	c.expireLocked()
	rec, ok := c.nodes[id]
	if ok && inc != "" && rec.inc != inc {
		c.mu.Unlock()
		httpError(w, http.StatusConflict, fmt.Errorf("node %q: the entry is another incarnation's", truncate(id)))
		return
	}
	if ok {
		c.removeLocked(id, rec)
	}
	c.mu.Unlock()
	if !ok {
		httpError(w, http.StatusNotFound, fmt.Errorf("node %q: %w", truncate(id), ErrNotFound))
		return
	}
	c.log.Info("coordinator: node deregistered", "node", id)
	w.WriteHeader(http.StatusNoContent)
}

// errorBody extracts the error message of a coordinator's answer.
func errorBody(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("coordinator answered %s: %s: %w", resp.Status, msg, ErrNotFound)
	}
	return fmt.Errorf("coordinator answered %s: %s", resp.Status, msg)
}

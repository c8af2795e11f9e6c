package directory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// httpDir is the client of a Coordinator.
type httpDir struct {
	base *url.URL
	o    Options
	registrar[*beat]
}

// beat is one of this client's registrations: its entry, the incarnation
// that the coordinator lets refresh and remove it, and its heartbeat.
type beat struct {
	reg
	inc string
}

func openHTTP(u *url.URL, o Options) *httpDir {
	d := &httpDir{base: u, o: o}
	d.open()
	return d
}

func (d *httpDir) url(path string) string { return d.base.JoinPath(path).String() }

func (d *httpDir) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.url(path), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("directory: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	d.authorize(req)
	resp, err := d.o.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("directory: coordinator %s: %w", d.base.Host, err)
	}
	return resp, nil
}

// authorize adds the coordinator's token, if there is one.
func (d *httpDir) authorize(req *http.Request) {
	if d.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.o.Token)
	}
}

// post registers or refreshes node id's entry as incarnation inc, and
// reports whether the coordinator created it (it had no live entry).
func (d *httpDir) post(ctx context.Context, id string, raw []byte, inc string) (created bool, _ error) {
	q := url.Values{"ttl": {d.o.TTL.String()}, "incarnation": {inc}}
	path := "/nodes/" + url.PathEscape(id) + "/rdma/endpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url(path)+"?"+q.Encode(), bytes.NewReader(raw))
	if err != nil {
		return false, fmt.Errorf("directory: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	d.authorize(req)
	resp, err := d.o.HTTPClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("directory: register node %s at %s: %w", id, d.base.Host, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated:
		return true, nil
	case http.StatusNoContent, http.StatusOK:
		return false, nil
	case http.StatusConflict:
		return false, takenAnswer(id, resp)
	}
	return false, fmt.Errorf("directory: register node %s: %w", id, errorBody(resp))
}

// takenAnswer decodes a coordinator's 409: the ID is another
// incarnation's.
func takenAnswer(id string, resp *http.Response) error {
	var e struct {
		Holder []string `json:"holder"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	te := &TakenError{NodeID: id}
	for _, a := range e.Holder {
		if checkAddr(id, a) == nil && len(te.Holder) < MaxAddrs {
			te.Holder = append(te.Holder, a)
		}
	}
	return te
}

func (d *httpDir) Register(ctx context.Context, e Entry) error {
	raw, err := d.encode(e)
	if err != nil {
		return err
	}
	d.regMu.Lock()
	defer d.regMu.Unlock()
	d.mu.Lock()
	b := d.regs[e.NodeID]
	if b != nil {
		b.raw = raw
	}
	d.mu.Unlock()
	if b != nil {
		_, err := d.post(ctx, e.NodeID, raw, b.inc)
		return err
	}
	inc := newIncarnation()
	sent := time.Now()
	if _, err := d.post(ctx, e.NodeID, raw, inc); err != nil {
		return err
	}
	bctx, stop := context.WithCancel(d.ctx)
	b = &beat{reg: reg{raw: raw, stop: stop, done: make(chan struct{}), st: newRegState(e.NodeID, sent)}, inc: inc}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		stop()
		return ErrClosed
	}
	d.regs[e.NodeID] = b
	d.wg.Go(func() { d.heartbeat(bctx, e.NodeID, b) })
	return nil
}

// heartbeat posts the entry again every TTL/3, so that it outlives a lost
// heartbeat or two; while posts fail it retries sooner, with backoff. A
// post that creates the entry (it had expired: this process was paused or
// cut off beyond its TTL, or the coordinator restarted) is a
// re-registration; one refused because another node holds the ID leaves
// the registration lost, and retried, until that node leaves.
func (d *httpDir) heartbeat(ctx context.Context, id string, b *beat) {
	defer close(b.done)
	last, fails := time.Now(), 0
	for {
		wait := d.o.TTL / 3
		if fails > 0 {
			wait = backoff(fails-1, wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		d.mu.Lock()
		raw := b.raw
		d.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, d.o.TTL/3)
		sent := time.Now()
		created, err := d.post(rctx, id, raw, b.inc)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fails++
			st := Retrying
			if errors.Is(err, ErrTaken) || time.Since(last) > d.o.TTL {
				st = Lost
			}
			if old := b.st.set(st, err); old != st {
				d.o.Logger.Warn("directory: heartbeat failed", "node", id, "state", st, "err", err)
			}
			continue
		}
		fails, last = 0, time.Now()
		b.st.renewed(sent)
		if created {
			b.st.set(Lost, nil)
			b.st.set(Registered, nil)
			d.o.Logger.Info("directory: the coordinator had no entry for this node (it expired, or the coordinator restarted): registered again", "node", id)
		} else if b.st.set(Registered, nil) != Registered {
			d.o.Logger.Info("directory: heartbeat got through again", "node", id)
		}
	}
}

func (d *httpDir) Deregister(ctx context.Context, id string) error {
	if err := CheckNodeID(id); err != nil {
		return err
	}
	d.regMu.Lock()
	defer d.regMu.Unlock()
	inc := ""
	if b, ok := d.take(id); ok {
		b.halt()
		inc = b.inc
	}
	return d.remove(ctx, id, inc)
}

// remove deletes node id's entry: only incarnation inc's, when inc is set
// (an entry another incarnation wrote since is left alone).
func (d *httpDir) remove(ctx context.Context, id, inc string) error {
	path := "/nodes/" + url.PathEscape(id)
	if inc != "" {
		path += "?" + url.Values{"incarnation": {inc}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, d.base.String()+path, nil)
	if err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	d.authorize(req)
	resp, err := d.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("directory: deregister node %s at %s: %w", id, d.base.Host, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusConflict:
		return nil // another node's entry now: this one's is gone
	}
	return fmt.Errorf("directory: deregister node %s: %w", id, errorBody(resp))
}

func (d *httpDir) Lookup(ctx context.Context, id string) (Entry, error) {
	if err := CheckNodeID(id); err != nil {
		return Entry{}, err
	}
	resp, err := d.do(ctx, http.MethodGet, "/nodes/"+url.PathEscape(id)+"/rdma/endpoint", nil)
	if err != nil {
		return Entry{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, errorBody(resp))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxEntrySize+1))
	if err != nil {
		return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, err)
	}
	e, err := Unmarshal(b)
	if err != nil {
		return Entry{}, fmt.Errorf("look up node %s: the coordinator's answer: %w", id, err)
	}
	if e.NodeID != id {
		return Entry{}, invalid("look up node %s: the coordinator answered with node %s", id, e.NodeID)
	}
	return e, nil
}

// maxList bounds a coordinator's list answer.
const maxList = 64 << 20

// decodeList decodes a coordinator's answer to GET /nodes: the entries
// that check, in order, and the list's revision ("" from a coordinator
// that has none); skip gets the error of each entry that does not check.
// An answer that is not {"nodes": [...]} is an error matching ErrInvalid.
func decodeList(r io.Reader, skip func(error)) ([]Entry, string, error) {
	var out struct {
		Revision string            `json:"revision"`
		Nodes    []json.RawMessage `json:"nodes"`
	}
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		return nil, "", invalid("list: the coordinator's answer: %v", err)
	}
	entries := make([]Entry, 0, len(out.Nodes))
	for _, raw := range out.Nodes {
		e, err := Unmarshal(raw)
		if err != nil {
			skip(err)
			continue
		}
		entries = append(entries, e)
	}
	return entries, out.Revision, nil
}

// send delivers ev unless either context ends first.
func send(ctx, dctx context.Context, ch chan<- Event, ev Event) bool {
	select {
	case ch <- ev:
		return true
	case <-ctx.Done():
	case <-dctx.Done():
	}
	return false
}

func (d *httpDir) Close() error {
	beats, ok := d.shut()
	if !ok {
		return nil
	}
	d.wg.Wait()
	// Remove this node's entries now rather than when they expire.
	ctx, cancel := context.WithTimeout(context.Background(), d.o.DialTimeout)
	defer cancel()
	var first error
	for id, b := range beats {
		if err := d.remove(ctx, id, b.inc); err != nil && first == nil {
			first = err
		}
	}
	return first
}

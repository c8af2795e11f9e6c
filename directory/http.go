package directory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// httpDir is the client of a Coordinator.
type httpDir struct {
	base *url.URL
	o    Options

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	beats  map[string]context.CancelFunc // heartbeats, by node ID
}

func openHTTP(u *url.URL, o Options) *httpDir {
	d := &httpDir{base: u, o: o, beats: map[string]context.CancelFunc{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
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

func (d *httpDir) post(ctx context.Context, e Entry, raw []byte) error {
	path := "/nodes/" + url.PathEscape(e.NodeID) + "/rdma/endpoint"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url(path)+"?ttl="+d.o.TTL.String(), bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	d.authorize(req)
	resp, err := d.o.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("directory: register node %s at %s: %w", e.NodeID, d.base.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("directory: register node %s: %w", e.NodeID, errorBody(resp))
	}
	return nil
}

func (d *httpDir) Register(ctx context.Context, e Entry) error {
	raw, err := encodeOpen(&d.mu, &d.closed, e)
	if err != nil {
		return err
	}
	if err := d.post(ctx, e, raw); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if stop := d.beats[e.NodeID]; stop != nil {
		stop()
	}
	bctx, stop := context.WithCancel(d.ctx)
	d.beats[e.NodeID] = stop
	d.wg.Go(func() { d.heartbeat(bctx, e, raw) })
	return nil
}

// heartbeat posts the entry again every TTL/3, so that it outlives a lost
// heartbeat or two.
func (d *httpDir) heartbeat(ctx context.Context, e Entry, raw []byte) {
	t := time.NewTicker(d.o.TTL / 3)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, d.o.TTL/3)
		err := d.post(rctx, e, raw)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			d.o.Logger.Warn("directory: heartbeat failed; the entry expires unless one gets through", "node", e.NodeID, "err", err)
			failing = true
		case err == nil && failing:
			d.o.Logger.Info("directory: heartbeat got through again", "node", e.NodeID)
			failing = false
		}
	}
}

func (d *httpDir) Deregister(ctx context.Context, id string) error {
	if err := CheckNodeID(id); err != nil {
		return err
	}
	d.mu.Lock()
	if stop := d.beats[id]; stop != nil {
		stop()
		delete(d.beats, id)
	}
	d.mu.Unlock()
	resp, err := d.do(ctx, http.MethodDelete, "/nodes/"+url.PathEscape(id), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("directory: deregister node %s: %w", id, errorBody(resp))
	}
	return nil
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

func (d *httpDir) List(ctx context.Context) ([]Entry, error) {
	resp, err := d.do(ctx, http.MethodGet, "/nodes", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("directory: list: %w", errorBody(resp))
	}
	return decodeList(io.LimitReader(resp.Body, maxList), func(err error) {
		d.o.Logger.Warn("directory: skipping a malformed entry", "err", err)
	})
}

// decodeList decodes a coordinator's answer to GET /nodes: the entries
// that check, in order; skip gets the error of each one that does not. An
// answer that is not {"nodes": [...]} is an error matching ErrInvalid.
func decodeList(r io.Reader, skip func(error)) ([]Entry, error) {
	var out struct {
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		return nil, invalid("list: the coordinator's answer: %v", err)
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
	return entries, nil
}

// Watch polls the coordinator's list and reports the differences.
func (d *httpDir) Watch(ctx context.Context) (<-chan Event, error) {
	first, err := d.List(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	ch := make(chan Event, 64)
	interval := min(max(d.o.TTL/4, 50*time.Millisecond), time.Second)
	d.wg.Go(func() {
		defer close(ch)
		seen := map[string]string{}
		report := func(now []Entry) bool {
			cur := make(map[string]string, len(now))
			for _, e := range now {
				raw, _ := json.Marshal(e)
				cur[e.NodeID] = string(raw)
				if seen[e.NodeID] != string(raw) {
					if !send(ctx, d.ctx, ch, Event{Kind: Join, Entry: e}) {
						return false
					}
				}
			}
			for id := range seen {
				if _, ok := cur[id]; !ok {
					if !send(ctx, d.ctx, ch, Event{Kind: Leave, Entry: Entry{NodeID: id}}) {
						return false
					}
				}
			}
			seen = cur
			return true
		}
		if !report(first) {
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-d.ctx.Done():
				return
			case <-t.C:
			}
			now, err := d.List(ctx)
			if err != nil {
				d.o.Logger.Debug("directory: watch: list failed", "err", err)
				continue
			}
			if !report(now) {
				return
			}
		}
	})
	return ch, nil
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
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	ids := make([]string, 0, len(d.beats))
	for id := range d.beats {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	// Remove this node's entries now rather than when they expire.
	ctx, cancel := context.WithTimeout(context.Background(), d.o.DialTimeout)
	defer cancel()
	var first error
	for _, id := range ids {
		if err := d.Deregister(ctx, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

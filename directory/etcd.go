package directory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdDir keeps entries in an etcd cluster, each under prefix/nodes/ID and
// bound to a lease that this client keeps alive.
type etcdDir struct {
	cli    *clientv3.Client
	prefix string // "/xfer/nodes/"
	o      Options

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	leases map[string]*lease // this client's registrations, by node ID
}

type lease struct {
	id   clientv3.LeaseID
	stop context.CancelFunc
}

func openEtcd(ctx context.Context, endpoints []string, prefix string, o Options) (*etcdDir, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: o.DialTimeout,
		Username:    o.Username,
		Password:    o.Password,
		TLS:         o.TLS,
		Context:     context.Background(),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("directory: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	// clientv3.New does not wait for a connection: ask the cluster once, so
	// that a wrong address fails here, clearly.
	sctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if _, err := cli.Get(sctx, prefix+"/nodes/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("directory: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	d := &etcdDir{cli: cli, prefix: prefix + "/nodes/", o: o, leases: map[string]*lease{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d, nil
}

func (d *etcdDir) key(id string) string { return d.prefix + id }

// ttlSeconds is the lease TTL: etcd counts whole seconds.
func (d *etcdDir) ttlSeconds() int64 {
	return max(int64((d.o.TTL+time.Second-1)/time.Second), 1)
}

func (d *etcdDir) Register(ctx context.Context, e Entry) error {
	raw, err := encodeOpen(&d.mu, &d.closed, e)
	if err != nil {
		return err
	}
	g, err := d.cli.Grant(ctx, d.ttlSeconds())
	if err != nil {
		return fmt.Errorf("directory: register node %s: lease: %w", e.NodeID, err)
	}
	if _, err := d.cli.Put(ctx, d.key(e.NodeID), string(raw), clientv3.WithLease(g.ID)); err != nil {
		d.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return fmt.Errorf("directory: register node %s: %w", e.NodeID, err)
	}
	kctx, stop := context.WithCancel(d.ctx)
	alive, err := d.cli.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		d.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return fmt.Errorf("directory: register node %s: keep the lease alive: %w", e.NodeID, err)
	}
	d.mu.Lock()
	old := d.leases[e.NodeID]
	d.leases[e.NodeID] = &lease{id: g.ID, stop: stop}
	closed := d.closed
	d.mu.Unlock()
	if old != nil {
		// The new entry is in place: let the old lease go.
		old.stop()
		d.cli.Revoke(context.WithoutCancel(ctx), old.id)
	}
	if closed {
		stop()
		return ErrClosed
	}
	d.wg.Go(func() {
		for range alive {
		}
		// The channel closes when kctx ends (Deregister, Close) or when the
		// lease could not be renewed: then the entry is gone.
		if kctx.Err() == nil {
			d.o.Logger.Warn("directory: the etcd lease of this node's entry was lost; the entry expired", "node", e.NodeID)
		}
	})
	return nil
}

func (d *etcdDir) Deregister(ctx context.Context, id string) error {
	if err := CheckNodeID(id); err != nil {
		return err
	}
	d.mu.Lock()
	l := d.leases[id]
	delete(d.leases, id)
	d.mu.Unlock()
	if l != nil {
		l.stop()
		if _, err := d.cli.Revoke(ctx, l.id); err != nil {
			return fmt.Errorf("directory: deregister node %s: %w", id, err)
		}
		return nil
	}
	r, err := d.cli.Delete(ctx, d.key(id))
	if err != nil {
		return fmt.Errorf("directory: deregister node %s: %w", id, err)
	}
	if r.Deleted == 0 {
		return fmt.Errorf("directory: deregister node %s: %w", id, ErrNotFound)
	}
	return nil
}

func (d *etcdDir) Lookup(ctx context.Context, id string) (Entry, error) {
	if err := CheckNodeID(id); err != nil {
		return Entry{}, err
	}
	r, err := d.cli.Get(ctx, d.key(id))
	if err != nil {
		return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, err)
	}
	if len(r.Kvs) == 0 {
		return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, ErrNotFound)
	}
	e, err := Unmarshal(r.Kvs[0].Value)
	if err != nil {
		return Entry{}, fmt.Errorf("look up node %s: %w", id, err)
	}
	if e.NodeID != id {
		return Entry{}, invalid("look up node %s: the entry under its key is for node %s", id, e.NodeID)
	}
	return e, nil
}

func (d *etcdDir) List(ctx context.Context) ([]Entry, error) {
	entries, _, err := d.list(ctx)
	return entries, err
}

func (d *etcdDir) list(ctx context.Context) ([]Entry, int64, error) {
	r, err := d.cli.Get(ctx, d.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("directory: list: %w", err)
	}
	entries := make([]Entry, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		e, err := d.decode(kv.Key, kv.Value)
		if err != nil {
			d.o.Logger.Warn("directory: skipping a malformed entry", "key", string(kv.Key), "err", err)
			continue
		}
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.NodeID, b.NodeID) })
	return entries, r.Header.Revision, nil
}

// decode decodes the entry stored under key, which must be its node's.
func (d *etcdDir) decode(key, value []byte) (Entry, error) {
	e, err := Unmarshal(value)
	if err != nil {
		return Entry{}, err
	}
	if want := d.key(e.NodeID); string(key) != want {
		return Entry{}, invalid("the entry of node %s is under %q, not %q", e.NodeID, key, want)
	}
	return e, nil
}

func (d *etcdDir) Watch(ctx context.Context) (<-chan Event, error) {
	first, rev, err := d.list(ctx)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	wch := d.cli.Watch(clientv3.WithRequireLeader(wctx), d.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	ch := make(chan Event, 64)
	d.wg.Go(func() {
		defer close(ch)
		defer cancel()
		for _, e := range first {
			if !send(ctx, d.ctx, ch, Event{Kind: Join, Entry: e}) {
				return
			}
		}
		for {
			var resp clientv3.WatchResponse
			var ok bool
			select {
			case resp, ok = <-wch:
			case <-d.ctx.Done():
				return
			}
			if !ok {
				return
			}
			if err := resp.Err(); err != nil {
				d.o.Logger.Warn("directory: etcd watch ended", "err", err)
				return
			}
			for _, ev := range resp.Events {
				var out Event
				switch ev.Type {
				case clientv3.EventTypePut:
					e, err := d.decode(ev.Kv.Key, ev.Kv.Value)
					if err != nil {
						d.o.Logger.Warn("directory: skipping a malformed entry", "key", string(ev.Kv.Key), "err", err)
						continue
					}
					out = Event{Kind: Join, Entry: e}
				case clientv3.EventTypeDelete:
					id := strings.TrimPrefix(string(ev.Kv.Key), d.prefix)
					if CheckNodeID(id) != nil {
						continue
					}
					out = Event{Kind: Leave, Entry: Entry{NodeID: id}}
				default:
					continue
				}
				if !send(ctx, d.ctx, ch, out) {
					return
				}
			}
		}
	})
	return ch, nil
}

func (d *etcdDir) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	leases := d.leases
	d.leases = map[string]*lease{}
	d.mu.Unlock()
	d.cancel()
	// Revoke this client's leases: its entries go now, not at expiry.
	ctx, cancel := context.WithTimeout(context.Background(), d.o.DialTimeout)
	defer cancel()
	var errs []error
	for id, l := range leases {
		l.stop()
		if _, err := d.cli.Revoke(ctx, l.id); err != nil {
			errs = append(errs, fmt.Errorf("directory: deregister node %s: %w", id, err))
		}
	}
	d.wg.Wait()
	if err := d.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package directory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdDir keeps entries in an etcd cluster, each under prefix/nodes/ID and
// bound to a lease that this client keeps alive.
type etcdDir struct {
	cli    *clientv3.Client
	prefix string // "/xfer/nodes/"
	o      Options
	registrar[*lease]
}

// lease is one of this client's registrations: its entry, the lease it is
// bound to, and the goroutine that keeps the lease alive and, when it is
// lost, registers the entry again with a new one.
type lease struct {
	reg
	id clientv3.LeaseID // guarded by etcdDir.mu
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
		if hint := diagnoseTLS(ctx, endpoints[0], o.TLS, err); hint != "" {
			return nil, fmt.Errorf("directory: etcd %s: %w (%s)", strings.Join(endpoints, ","), err, hint)
		}
		return nil, fmt.Errorf("directory: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	d := &etcdDir{cli: cli, prefix: prefix + "/nodes/", o: o}
	d.open()
	return d, nil
}

func (d *etcdDir) key(id string) string { return d.prefix + id }

// ttlSeconds is the lease TTL: etcd counts whole seconds.
func (d *etcdDir) ttlSeconds() int64 {
	return max(int64((d.o.TTL+time.Second-1)/time.Second), 1)
}

// bound gives a request whose ctx has no deadline RequestTimeout.
func (d *etcdDir) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.o.RequestTimeout)
}

// at names the backend in an error: "at etcd HOST:PORT,...".
func (d *etcdDir) at(err error) error {
	return fmt.Errorf("at etcd %s: %w", strings.Join(d.cli.Endpoints(), ","), err)
}

func (d *etcdDir) Register(ctx context.Context, e Entry) (err error) {
	raw, err := d.encode(e)
	if err != nil {
		return err
	}
	raw = withOwner(e, raw)
	ctx, cancel := d.bound(ctx)
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = d.at(err)
		}
	}()
	d.regMu.Lock()
	defer d.regMu.Unlock()
	d.mu.Lock()
	l := d.regs[e.NodeID]
	if l != nil {
		l.raw = raw
		lid := l.id
		d.mu.Unlock()
		return d.update(ctx, e.NodeID, raw, lid)
	}
	d.mu.Unlock()
	sent := time.Now() // the lease runs from a moment after this
	lid, took, err := d.claim(ctx, e.NodeID, raw, 0)
	if err != nil {
		return err
	}
	kctx, stop := context.WithCancel(d.ctx)
	l = &lease{id: lid, reg: reg{raw: raw, stop: stop, done: make(chan struct{}), st: newRegState(e.NodeID, sent)}}
	l.st.tookOver(took)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		stop()
		d.cli.Revoke(context.WithoutCancel(ctx), lid)
		return ErrClosed
	}
	d.regs[e.NodeID] = l
	d.wg.Go(func() { d.keep(kctx, e.NodeID, l) })
	d.mu.Unlock()
	return nil
}

// update replaces this client's entry of node id, bound to lease lid, with
// raw, if the key still holds the entry of that lease. When it does not
// (the lease was lost), keep registers raw again.
func (d *etcdDir) update(ctx context.Context, id string, raw []byte, lid clientv3.LeaseID) error {
	key := d.key(id)
	r, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", lid)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(lid))).Commit()
	if err != nil {
		return fmt.Errorf("directory: register node %s: %w", id, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("directory: register node %s: its lease was lost; the entry is being registered again, with this update", id)
	}
	return nil
}

// claim creates node id's entry, raw, bound to a new lease, if the key is
// absent or bound to lease old (this client's lost lease, when etcd has
// not expired it yet), or held by a process that is provably gone (this
// node's previous run on this host, killed: see owner), whose lease it
// revokes (took: the entry replaced a live one of this node's previous
// run); else the ID is another node's and claim returns a *TakenError.
func (d *etcdDir) claim(ctx context.Context, id string, raw []byte, old clientv3.LeaseID) (_ clientv3.LeaseID, took bool, _ error) {
	g, err := d.cli.Grant(ctx, d.ttlSeconds())
	if err != nil {
		return 0, false, fmt.Errorf("directory: register node %s: lease: %w", id, err)
	}
	key := d.key(id)
	fail := func(err error) (clientv3.LeaseID, bool, error) {
		d.cli.Revoke(context.WithoutCancel(ctx), g.ID)
		return 0, false, err
	}
	r, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(g.ID))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return fail(fmt.Errorf("directory: register node %s: %w", id, err))
	}
	if r.Succeeded {
		return g.ID, false, nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fail(fmt.Errorf("directory: register node %s: the key changed under the registration; try again", id))
	}
	if old == 0 || clientv3.LeaseID(kvs[0].Lease) != old {
		prev := kvs[0]
		o, gone := holderGone(prev.Value)
		if !gone {
			return fail(takenBy(id, prev.Value))
		}
		// The holder is this host's process that is gone: its lease would
		// hold the ID for up to a TTL more. Take the key over, if it
		// still holds that entry, and revoke the dead lease.
		r, err = d.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", prev.ModRevision)).
			Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(g.ID))).Commit()
		if err != nil || !r.Succeeded {
			return fail(fmt.Errorf("directory: register node %s: the key changed under the registration (%v); try again", id, err))
		}
		if prev.Lease != 0 {
			d.cli.Revoke(context.WithoutCancel(ctx), clientv3.LeaseID(prev.Lease))
		}
		d.o.Logger.Info("directory: took the node ID over from a process of this host that is gone, without waiting for its lease", "node", id, "pid", o.PID)
		return g.ID, true, nil
	}
	r, err = d.cli.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", old)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(g.ID))).Commit()
	if err != nil || !r.Succeeded {
		return fail(fmt.Errorf("directory: register node %s: the key changed under the registration (%v); try again", id, err))
	}
	d.cli.Revoke(context.WithoutCancel(ctx), old)
	return g.ID, false, nil
}

// keep keeps l's lease alive until ctx ends (Deregister, Close). When the
// lease is lost (not renewed within its TTL: etcd unreachable, this
// process paused), the entry is gone: keep registers it again with a new
// lease, with backoff, until it succeeds or ctx ends.
func (d *etcdDir) keep(ctx context.Context, id string, l *lease) {
	defer close(l.done)
	ttl := time.Duration(d.ttlSeconds()) * time.Second
	for {
		d.mu.Lock()
		lid := l.id
		d.mu.Unlock()
		d.alive(ctx, l, lid, ttl)
		if ctx.Err() != nil {
			return
		}
		lost := errors.New("the etcd lease was not renewed within its TTL: the entry expired")
		l.st.set(Lost, lost)
		d.o.Logger.Warn("directory: the etcd lease of this node's entry was lost; registering it again", "node", id)
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff(n, ttl)):
			}
			d.mu.Lock()
			raw := l.raw
			d.mu.Unlock()
			cctx, cancel := context.WithTimeout(ctx, d.o.DialTimeout)
			sent := time.Now()
			nid, _, err := d.claim(cctx, id, raw, lid)
			cancel()
			if err == nil {
				l.st.renewed(sent)
				l.st.tookOver(false)
				d.mu.Lock()
				l.id = nid
				d.mu.Unlock()
				if ctx.Err() != nil {
					return // Deregister or Close revokes l.id
				}
				l.st.set(Registered, nil)
				d.o.Logger.Info("directory: registered again with a new lease", "node", id)
				break
			}
			if ctx.Err() != nil {
				return
			}
			if n == 0 || errors.Is(err, ErrTaken) {
				d.o.Logger.Warn("directory: registering again failed; retrying", "node", id, "err", err)
			}
			l.st.set(Lost, err)
		}
	}
}

// alive keeps lease lid alive until ctx ends or the lease is lost, and
// keeps l's state: Retrying while renewals do not get through.
func (d *etcdDir) alive(ctx context.Context, l *lease, lid clientv3.LeaseID, ttl time.Duration) {
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := d.cli.KeepAlive(kctx, lid)
	if err != nil {
		return
	}
	t := time.NewTicker(max(ttl/4, 50*time.Millisecond))
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case r, ok := <-ch:
			if !ok || r == nil {
				return // the lease expired, or ctx ended
			}
			last = time.Now()
			l.st.renewed(last)
			if l.st.get().State == Retrying {
				l.st.set(Registered, nil)
				d.o.Logger.Info("directory: the etcd lease is renewed again", "node", l.st.get().NodeID)
			}
		case <-t.C:
			// etcd renews every third of the TTL: two thirds without a
			// renewal means it does not answer.
			if time.Since(last) > 2*ttl/3 && l.st.get().State == Registered {
				l.st.set(Retrying, errors.New("the etcd lease has not been renewed for "+time.Since(last).Round(time.Millisecond).String()))
				d.o.Logger.Warn("directory: the etcd lease is not being renewed", "node", l.st.get().NodeID)
			}
		}
	}
}

func (d *etcdDir) Deregister(ctx context.Context, id string) error {
	if err := CheckNodeID(id); err != nil {
		return err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	d.regMu.Lock()
	defer d.regMu.Unlock()
	if l, ok := d.take(id); ok {
		// Revoking the lease deletes only the keys bound to it: this
		// client's entry, never one another node wrote since.
		l.halt()
		if err := d.revoke(ctx, l.id); err != nil {
			return fmt.Errorf("directory: deregister node %s: %w", id, d.at(err))
		}
		return nil
	}
	r, err := d.cli.Delete(ctx, d.key(id))
	if err != nil {
		return fmt.Errorf("directory: deregister node %s: %w", id, d.at(err))
	}
	if r.Deleted == 0 {
		return fmt.Errorf("directory: deregister node %s: %w", id, ErrNotFound)
	}
	return nil
}

// revoke revokes lease lid; one that expired already is not an error.
func (d *etcdDir) revoke(ctx context.Context, lid clientv3.LeaseID) error {
	if _, err := d.cli.Revoke(ctx, lid); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return err
	}
	return nil
}

func (d *etcdDir) Lookup(ctx context.Context, id string) (Entry, error) {
	if err := CheckNodeID(id); err != nil {
		return Entry{}, err
	}
	ctx, cancel := d.bound(ctx)
	defer cancel()
	r, err := d.cli.Get(ctx, d.key(id))
	if err != nil {
		return Entry{}, fmt.Errorf("directory: look up node %s: %w", id, d.at(err))
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
	ls, _, err := d.list(ctx)
	if err != nil {
		return nil, err
	}
	entries := make([]Entry, len(ls))
	for i, l := range ls {
		entries[i] = l.Entry
	}
	return entries, nil
}

// listed is an entry as a list found it, with the revision that last
// modified it.
type listed struct {
	Entry
	mod int64
}

// list lists the entries, sorted by node ID, and returns the revision
// they are the state of.
func (d *etcdDir) list(ctx context.Context) ([]listed, int64, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	r, err := d.cli.Get(ctx, d.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("directory: list: %w", d.at(err))
	}
	entries := make([]listed, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		e, err := d.decode(kv.Key, kv.Value)
		if err != nil {
			d.o.Logger.Warn("directory: skipping a malformed entry", "key", string(kv.Key), "err", err)
			continue
		}
		entries = append(entries, listed{Entry: e, mod: kv.ModRevision})
	}
	slices.SortFunc(entries, func(a, b listed) int { return strings.Compare(a.NodeID, b.NodeID) })
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

func (d *etcdDir) Close() error {
	leases, ok := d.shut()
	if !ok {
		return nil
	}
	// Revoke this client's leases: its entries go now, not at expiry.
	ctx, cancel := context.WithTimeout(context.Background(), d.o.DialTimeout)
	defer cancel()
	var errs []error
	d.wg.Wait()
	for id, l := range leases {
		if err := d.revoke(ctx, l.id); err != nil {
			errs = append(errs, fmt.Errorf("directory: deregister node %s: %w", id, err))
		}
	}
	if err := d.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package kv

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv/internal/placement"
)

// DefaultDownFor is how long a Cluster leaves out a server it could not
// reach before trying it again (ClusterOptions.DownFor).
const DefaultDownFor = time.Second

// ClusterOptions configures a Cluster.
type ClusterOptions struct {
	// Directory is the URL of the directory the servers register in:
	// http://HOST:PORT (a coordinator) or etcd://HOST:2379/PREFIX.
	// Required.
	Directory string
	// DirectoryToken is the coordinator's token, for a coordinator that
	// protects reads. Default: none.
	DirectoryToken string
	// DirectoryTLS is the directory client's TLS: a client certificate
	// for an etcd that requires one (xfer.Config.DirectoryTLS loads it
	// from the directory_tls_* keys). Default: none.
	DirectoryTLS *tls.Config
	// Client configures the client of each server. All of them share one
	// engine: Client.Engine, or one the cluster opens with
	// Client.EngineConfig and closes. FailFast is implied.
	Client ClientOptions
	// DownFor is how long a server that could not be reached is left out
	// of the key placement, unless the directory reports it left or
	// registered again first. Default: DefaultDownFor.
	DownFor time.Duration
	// Replicas is the number of servers each PUT stores its value on: the
	// key's first Replicas servers in placement order (distinct
	// servers clockwise on the ring, kv/internal/placement). A GET reads
	// the first of them it can reach, so a value survives the loss of
	// Replicas-1 of its servers; a Delete removes it
	// from all it can reach. Every client of a directory should use the
	// same count (docs/KV.md, "Replicas"). 1 to MaxReplicas. Default: 1.
	Replicas int
	// PlacementWait is how long a write keeps being retried while servers
	// refuse it because the placement is changing (ErrMoved: a server
	// joining, leaving or rejoining); before each retry the cluster lists
	// the directory again. Default: DefaultPlacementWait.
	PlacementWait time.Duration
	// IdleClose closes the connection to a server that no operation used
	// for this long (its gRPC connection, data-plane peer and message
	// buffers); the next operation on that server connects again. A client
	// of many servers then holds only those it talks to. Negative: never.
	// Default: DefaultIdleClose.
	IdleClose time.Duration
}

// clusterMsgBufs is how many request buffers a Cluster's clients share:
// as many data-plane requests in flight at once, at most clientMsgBufs of
// them to one server.
const clusterMsgBufs = 4 * clientMsgBufs

// DefaultIdleClose is ClusterOptions.IdleClose's default.
const DefaultIdleClose = 5 * time.Minute

// DefaultPlacementWait is ClusterOptions.PlacementWait's default: longer
// than a rejoining server's delay before it takes writes (twice the
// smaller of half its directory TTL and 2 s).
const DefaultPlacementWait = 10 * time.Second

// Cluster is a client of every live KV server registered in a directory:
// it places each key on one server by consistent hashing over the
// servers' node IDs (kv/internal/placement), so that every client with the same
// view of the directory places a key on the same server, and a server that
// joins or leaves moves only the keys it gains or had.
//
// It watches the directory: a server whose entry expires (its lease or
// heartbeats ran out) or that deregistered is dropped, and its keys map to
// the others from then on. A server that cannot be reached is left out at
// once, for DownFor, without waiting for its entry to expire. The KV is a
// cache: the values of a lost server are lost, and a GET of one of them
// says "not found" (ErrNotFound) once the key maps to another server. The
// servers fence their answers (fence.go), so that a GET never returns a
// value older than the latest acknowledged write; a write that a server
// refuses while the placement changes (ErrMoved) is retried for
// PlacementWait.
//
// Its methods are safe for concurrent use.
type Cluster struct {
	opts    ClusterOptions
	dir     directory.Directory
	e       *xfer.Engine
	ownsEng bool
	log     *slog.Logger

	mu      sync.Mutex
	members map[string]*member // by node ID; guarded by mu
	snap    atomic.Pointer[view]
	closed  atomic.Bool
	lists   singleflight.Group // resync's lists
	idle    atomic.Uint64      // connections closed for being idle
	msgs    *msgBufs           // the request buffers its clients share

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// view is a snapshot of a Cluster's servers, sorted by node ID, with the
// ring that places keys on them (placement.Ring indexes ms).
type view struct {
	ms   []*member
	ring *placement.Ring
}

// member is one server of a Cluster.
type member struct {
	id   string
	addr string // its gRPC address (the entry's "kv" service)

	mu   sync.Mutex
	cl   *Client // dialed on first use
	gone bool    // removed from the cluster; cl is closed

	downUntil atomic.Int64 // unix nanoseconds
	lastUse   atomic.Int64 // when an operation last took cl: unix nanoseconds
}

// DialCluster opens the directory at opts.Directory, lists the KV servers
// registered there and watches them.
func DialCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Directory == "" || opts.Directory == "p2p" {
		return nil, fmt.Errorf("kv: cluster: %w", directory.ErrNoDirectory)
	}
	if opts.DownFor <= 0 {
		opts.DownFor = DefaultDownFor
	}
	if opts.IdleClose == 0 {
		opts.IdleClose = DefaultIdleClose
	}
	if opts.PlacementWait <= 0 {
		opts.PlacementWait = DefaultPlacementWait
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.Replicas < 1 || opts.Replicas > MaxReplicas {
		return nil, fmt.Errorf("kv: cluster: %d replicas: must be 1 to %d: %w", opts.Replicas, MaxReplicas, ErrInvalid)
	}
	c := &Cluster{opts: opts, e: opts.Client.Engine, log: opts.Client.Logger, members: map[string]*member{}}
	if c.log == nil {
		c.log = opts.Client.EngineConfig.Logger
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	c.dir, err = directory.Open(ctx, opts.Directory, directory.Options{Logger: c.log, Token: opts.DirectoryToken, TLS: opts.DirectoryTLS})
	if err != nil {
		return nil, fmt.Errorf("kv: cluster: %w", err)
	}
	if c.e == nil {
		cfg := opts.Client.EngineConfig
		if cfg.TCP.PollSpin == 0 {
			cfg.TCP.PollSpin = DefaultPollSpin
		}
		if c.e, err = xfer.Open(ctx, cfg); err != nil {
			c.dir.Close()
			return nil, fmt.Errorf("kv: cluster engine: %w", err)
		}
		c.ownsEng = true
	}
	c.opts.Client.Engine = c.e
	c.opts.Client.FailFast = true
	if c.opts.Client.Requests == "" || c.opts.Client.Requests == RequestsData {
		// One set of request buffers for every server's client, not one
		// each: a client of many servers holds clusterMsgBufs of them.
		if c.msgs, err = newRequestBufs(c.e, clusterMsgBufs); err != nil {
			c.dir.Close()
			if c.ownsEng {
				c.e.Close()
			}
			return nil, err
		}
		c.opts.Client.msgs = c.msgs
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.publish()
	ents, err := c.dir.List(ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kv: cluster: list the servers in %s: %w", opts.Directory, err)
	}
	for _, ent := range ents {
		c.join(ent)
	}
	c.publish()
	ch, err := c.dir.Watch(c.ctx)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kv: cluster: watch %s: %w", opts.Directory, err)
	}
	c.wg.Go(func() { c.watch(ch) })
	if c.opts.IdleClose > 0 {
		c.wg.Go(c.reap)
	}
	return c, nil
}

// watch applies the directory's changes until the cluster closes; when the
// directory ends the watch early, it watches again. A new watch reports
// the servers there are as joins, but not those that left while no watch
// ran: after watching again, it lists the directory and drops the members
// the list lacks (resync), so that none is kept as a ghost. The list is
// taken after the new watch's, so a server that left between the two is
// reported by the watch as a leave, and one that joined as a join.
func (c *Cluster) watch(ch <-chan directory.Event) {
	for {
		for ch != nil { // nil: the last Watch failed
			ev, ok := <-ch
			if !ok {
				break
			}
			switch ev.Kind {
			case directory.Join:
				c.join(ev.Entry)
			case directory.Leave:
				c.leave(ev.Entry.NodeID)
			}
			c.publish()
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		var err error
		if ch, err = c.dir.Watch(c.ctx); err != nil {
			c.log.Warn("kv: cluster: watch the directory", "directory", c.opts.Directory, "err", err)
			ch = nil
			continue
		}
		c.resync(c.ctx)
	}
}

// resync lists the directory and applies it at once, rather than when the
// watch reports it. Concurrent calls share one list (the retries of many
// refused writes make one request, not one each); ctx bounds the wait.
func (c *Cluster) resync(ctx context.Context) {
	ch := c.lists.DoChan("list", func() (any, error) {
		c.resyncOnce(c.ctx)
		return nil, nil
	})
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (c *Cluster) resyncOnce(ctx context.Context) {
	ents, err := c.dir.List(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, ent := range ents {
		if ent.Services[ServiceName] != "" {
			live[ent.NodeID] = true
		}
		c.join(ent)
	}
	c.mu.Lock()
	var gone []string
	for id := range c.members {
		if !live[id] {
			gone = append(gone, id)
		}
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.leave(id)
	}
	c.publish()
}

// join adds or updates a server (an entry without the kv service is not
// a KV server, or not yet one).
func (c *Cluster) join(ent directory.Entry) {
	addr := ent.Services[ServiceName]
	if addr == "" {
		c.leave(ent.NodeID)
		return
	}
	c.mu.Lock()
	old := c.members[ent.NodeID]
	if old != nil && old.addr == addr {
		old.downUntil.Store(0) // it registered again: worth a try
		c.mu.Unlock()
		return
	}
	c.members[ent.NodeID] = &member{id: ent.NodeID, addr: addr}
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
	c.log.Debug("kv: cluster: server joined", "node", ent.NodeID, "addr", addr)
}

// leave drops a server.
func (c *Cluster) leave(id string) {
	c.mu.Lock()
	m := c.members[id]
	delete(c.members, id)
	c.mu.Unlock()
	if m != nil {
		m.close()
		c.log.Debug("kv: cluster: server left", "node", id)
	}
}

// publish makes the current members the placement's snapshot.
func (c *Cluster) publish() {
	c.mu.Lock()
	ms := make([]*member, 0, len(c.members))
	for _, m := range c.members {
		ms = append(ms, m)
	}
	c.mu.Unlock()
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Compare(a.id, b.id) })
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.id
	}
	c.snap.Store(&view{ms: ms, ring: placement.New(ids)})
}

func (m *member) close() {
	m.mu.Lock()
	cl := m.cl
	m.cl, m.gone = nil, true
	m.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}

// client returns the member's client, dialing it on first use.
func (m *member) client(ctx context.Context, opts ClientOptions) (*Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone {
		return nil, fmt.Errorf("kv: server %s left: %w", m.id, ErrUnavailable)
	}
	m.lastUse.Store(time.Now().UnixNano())
	if m.cl != nil {
		return m.cl, nil
	}
	cl, err := Dial(ctx, m.addr, opts)
	if err != nil {
		return nil, fmt.Errorf("kv: server %s: %w", m.id, err)
	}
	cl.noWait = true
	m.cl = cl
	return cl, nil
}

// closeIdle closes m's client if no operation took it since cutoff (unix
// nanoseconds), and reports whether it did.
func (m *member) closeIdle(cutoff int64) bool {
	m.mu.Lock()
	cl := m.cl
	if cl == nil || m.lastUse.Load() > cutoff {
		m.mu.Unlock()
		return false
	}
	m.cl = nil
	m.mu.Unlock()
	cl.Close()
	return true
}

// reap closes the connections that went unused for IdleClose, until the
// cluster closes.
func (c *Cluster) reap() {
	t := time.NewTicker(max(c.opts.IdleClose/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-c.opts.IdleClose).UnixNano()
		for _, m := range c.snap.Load().ms {
			if m.closeIdle(cutoff) {
				c.idle.Add(1)
				c.log.Debug("kv: cluster: closed an idle connection", "node", m.id, "idle", c.opts.IdleClose)
			}
		}
	}
}

// IdleClosed is the number of connections to servers closed for being
// unused for ClusterOptions.IdleClose.
func (c *Cluster) IdleClosed() uint64 { return c.idle.Load() }

// pick returns key's first server in placement order among the live ones
// not in tried, or nil.
func (c *Cluster) pick(key string, tried []*member) *member {
	now := time.Now().UnixNano()
	v := c.snap.Load()
	for i := range v.ring.Order(placement.Key(key)) {
		if m := v.ms[i]; m.downUntil.Load() <= now && !slices.Contains(tried, m) {
			return m
		}
	}
	return nil
}

// do runs f on the client of key's server; when that server cannot be
// reached it is left out for DownFor and f runs on the next one.
func (c *Cluster) do(ctx context.Context, key string, f func(*Client) error) error {
	if c.closed.Load() {
		return fmt.Errorf("kv: cluster: %w", xfer.ErrClosed)
	}
	var tried []*member
	var last error
	var moved time.Time // when the first ErrMoved came
	for n := 0; ; n++ {
		m := c.pick(key, tried)
		if m == nil {
			if last != nil {
				return fmt.Errorf("kv: no KV server in %s could be reached (last: %w)", c.opts.Directory, last)
			}
			return fmt.Errorf("kv: no live KV server in %s: %w", c.opts.Directory, ErrUnavailable)
		}
		cl, err := m.client(ctx, c.opts.Client)
		if err == nil {
			err = f(cl)
		}
		if errors.Is(err, ErrMoved) && ctx.Err() == nil {
			// The server does not own the key now: the placement is
			// changing. Look again, wait a little, and retry.
			if moved.IsZero() {
				moved = time.Now()
			}
			if time.Since(moved) > c.opts.PlacementWait {
				return err
			}
			c.resync(ctx)
			select {
			case <-ctx.Done():
				return err
			case <-time.After(min(20*time.Millisecond<<min(n, 5), 500*time.Millisecond)):
			}
			tried = nil
			continue
		}
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		m.downUntil.Store(time.Now().Add(c.opts.DownFor).UnixNano())
		c.log.Debug("kv: cluster: server unreachable, left out", "node", m.id, "for", c.opts.DownFor, "err", err)
		tried, last = append(tried, m), err
	}
}

// Get returns key's value from its server (Client.Get).
func (c *Cluster) Get(ctx context.Context, key string) (v []byte, err error) {
	err = c.do(ctx, key, func(cl *Client) error { v, err = cl.Get(ctx, key); return err })
	return v, err
}

// GetInto has key's server write its value into buf, a buffer of the
// cluster's engine (Client.GetInto).
func (c *Cluster) GetInto(ctx context.Context, key string, buf xfer.Buffer) (n int, err error) {
	err = c.do(ctx, key, func(cl *Client) error { n, err = cl.GetInto(ctx, key, buf); return err })
	return n, err
}

// Put stores value under key on its servers (Client.Put): on its first
// ClusterOptions.Replicas servers.
func (c *Cluster) Put(ctx context.Context, key string, value []byte) error {
	return c.PutWith(ctx, key, value, PutOptions{})
}

// PutWith is Put with options (Client.PutWith).
func (c *Cluster) PutWith(ctx context.Context, key string, value []byte, o PutOptions) error {
	f, err := o.fields()
	if err != nil {
		return err
	}
	return c.put(ctx, key, f, func(cl *Client, f putFields) error { return cl.putWith(ctx, key, value, f) })
}

// PutBuffer stores the first n bytes of buf under key on its servers
// (Client.PutBuffer).
func (c *Cluster) PutBuffer(ctx context.Context, key string, buf xfer.Buffer, n int) error {
	return c.PutBufferWith(ctx, key, buf, n, PutOptions{})
}

// PutBufferWith is PutBuffer with options (Client.PutBufferWith).
func (c *Cluster) PutBufferWith(ctx context.Context, key string, buf xfer.Buffer, n int, o PutOptions) error {
	f, err := o.fields()
	if err != nil {
		return err
	}
	return c.put(ctx, key, f, func(cl *Client, f putFields) error { return cl.putBufferWith(ctx, key, buf, n, f) })
}

// Delete removes key from its servers (Client.Delete).
func (c *Cluster) Delete(ctx context.Context, key string) error {
	return c.DeleteWith(ctx, key, DeleteOptions{})
}

// DeleteWith is Delete with options (Client.DeleteWith).
func (c *Cluster) DeleteWith(ctx context.Context, key string, o DeleteOptions) error {
	if c.opts.Replicas == 1 {
		return c.do(ctx, key, func(cl *Client) error { return cl.delete(ctx, key, o.Force, 0) })
	}
	return c.deleteReplicas(ctx, key, o.Force)
}

// put stores key's value with put on its servers.
func (c *Cluster) put(ctx context.Context, key string, f putFields, put func(*Client, putFields) error) error {
	if c.opts.Replicas == 1 {
		return c.do(ctx, key, func(cl *Client) error { return put(cl, f) })
	}
	f.replicas = uint32(c.opts.Replicas)
	return c.putReplicas(ctx, key, f, put)
}

// replicaSet is key's first n servers in placement order, those left out
// for being unreachable included: the servers place replicas in their
// views of the directory alike.
func (c *Cluster) replicaSet(key string, n int) []*member {
	v := c.snap.Load()
	set := make([]*member, 0, min(n, len(v.ms)))
	for i := range v.ring.Order(placement.Key(key)) {
		if len(set) == n {
			break
		}
		set = append(set, v.ms[i])
	}
	return set
}

// errLeftOut is the error of a server left out for being unreachable.
var errLeftOut = fmt.Errorf("left out for being unreachable: %w", ErrUnavailable)

// onReplicas runs f on the client of each server of set, at once; a
// server left out for being unreachable gets errLeftOut, and one found
// unreachable now is left out from now on.
func (c *Cluster) onReplicas(ctx context.Context, set []*member, f func(*Client) error) []error {
	errs := make([]error, len(set))
	now := time.Now().UnixNano()
	var wg sync.WaitGroup
	for i, m := range set {
		if m.downUntil.Load() > now {
			errs[i] = errLeftOut
			continue
		}
		wg.Go(func() {
			cl, err := m.client(ctx, c.opts.Client)
			if err == nil {
				err = f(cl)
			}
			if err != nil && errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
				m.downUntil.Store(time.Now().Add(c.opts.DownFor).UnixNano())
				c.log.Debug("kv: cluster: server unreachable, left out", "node", m.id, "for", c.opts.DownFor, "err", err)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// putReplicas stores key's value on its first Replicas servers, at once.
// It succeeds when every server it could reach stored it and at least one
// did: a server that cannot be reached is skipped (it holds fewer
// replicas, as Mooncake's master places fewer when fewer segments have
// room). While servers refuse because the placement is changing
// (ErrMoved) it retries, as do. Any other refusal (ErrFull, ErrInvalid,
// ...) fails the PUT, and the key is removed from every server of the set
// (best effort): later GETs miss rather than find the value on some
// replicas only, or an older one.
func (c *Cluster) putReplicas(ctx context.Context, key string, f putFields, put func(*Client, putFields) error) error {
	if c.closed.Load() {
		return fmt.Errorf("kv: cluster: %w", xfer.ErrClosed)
	}
	var moved time.Time
	for n := 0; ; n++ {
		set := c.replicaSet(key, c.opts.Replicas)
		if len(set) == 0 {
			return fmt.Errorf("kv: no live KV server in %s: %w", c.opts.Directory, ErrUnavailable)
		}
		errs := c.onReplicas(ctx, set, func(cl *Client) error { return put(cl, f) })
		var acked int
		var movedErr, failed, unreachable error
		for _, err := range errs {
			switch {
			case err == nil:
				acked++
			case errors.Is(err, ErrMoved):
				movedErr = err
			case errors.Is(err, ErrUnavailable):
				unreachable = err
			default:
				failed = cmp.Or(failed, err)
			}
		}
		switch {
		case failed == nil && movedErr == nil && acked > 0:
			return nil
		case failed == nil && movedErr == nil:
			return fmt.Errorf("kv: none of the %d servers of key %q could be reached (last: %w)", len(set), key, unreachable)
		case failed == nil && ctx.Err() == nil:
			if moved.IsZero() {
				moved = time.Now()
			}
			if time.Since(moved) <= c.opts.PlacementWait {
				c.resync(ctx)
				select {
				case <-ctx.Done():
				case <-time.After(min(20*time.Millisecond<<min(n, 5), 500*time.Millisecond)):
				}
				continue
			}
			failed = movedErr
		}
		if failed == nil {
			failed = cmp.Or(ctx.Err(), movedErr)
		}
		// Undo: no server is to keep a value of this PUT, or an older one.
		undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		c.onReplicas(undo, set, func(cl *Client) error { return cl.delete(undo, key, true, f.replicas) })
		cancel()
		return fmt.Errorf("kv: put of key %q on %d replicas failed; removed from them: %w", key, len(set), failed)
	}
}

// deleteReplicas removes key from its first Replicas servers: from the
// first it can reach (where a GET's read lease may refuse it, and then
// nothing is removed), then, forced, from the others at once. It is not
// found when none held it.
func (c *Cluster) deleteReplicas(ctx context.Context, key string, force bool) error {
	if c.closed.Load() {
		return fmt.Errorf("kv: cluster: %w", xfer.ErrClosed)
	}
	reps := uint32(c.opts.Replicas)
	set := c.replicaSet(key, c.opts.Replicas)
	found := false
	var last error
	for i := range set {
		errs := c.onReplicas(ctx, set[i:i+1], func(cl *Client) error { return cl.delete(ctx, key, force, reps) })
		err := errs[0]
		if errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
			last = err
			continue
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err // a lease, a moved key: nothing removed
		}
		found = err == nil
		rest := slices.Concat(set[:i], set[i+1:])
		for _, err := range c.onReplicas(ctx, rest, func(cl *Client) error { return cl.delete(ctx, key, true, reps) }) {
			switch {
			case err == nil:
				found = true
			case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnavailable):
			default:
				c.log.Debug("kv: cluster: delete of a replica", "key", key, "err", err)
			}
		}
		if !found {
			return err // ErrNotFound from the first
		}
		return nil
	}
	if last == nil {
		return fmt.Errorf("kv: no live KV server in %s: %w", c.opts.Directory, ErrUnavailable)
	}
	return fmt.Errorf("kv: none of the servers of key %q could be reached (last: %w)", key, last)
}

// Servers lists the node IDs of the servers the cluster places keys on,
// sorted: those registered in the directory, less those left out for
// being unreachable.
func (c *Cluster) Servers() []string {
	now := time.Now().UnixNano()
	var ids []string
	for _, m := range c.snap.Load().ms {
		if m.downUntil.Load() <= now {
			ids = append(ids, m.id)
		}
	}
	return ids
}

// Owner is the node ID of the server key goes to now, or "" when there is
// none.
func (c *Cluster) Owner(key string) string {
	if m := c.pick(key, nil); m != nil {
		return m.id
	}
	return ""
}

// Stats returns each server's counters, by node ID; a server that cannot
// be reached is missing, and named in the error.
func (c *Cluster) Stats(ctx context.Context) (map[string]Stats, error) {
	out := map[string]Stats{}
	var errs []error
	for _, m := range c.snap.Load().ms {
		cl, err := m.client(ctx, c.opts.Client)
		if err == nil {
			var st Stats
			if st, err = cl.Stats(ctx); err == nil {
				out[m.id] = st
				continue
			}
		}
		errs = append(errs, fmt.Errorf("server %s: %w", m.id, err))
	}
	return out, errors.Join(errs...)
}

// Engine is the engine the cluster's clients share; buffers for GetInto
// and PutBuffer come from its pool.
func (c *Cluster) Engine() *xfer.Engine { return c.e }

// Close closes every server's client, stops watching, and closes the
// directory and, when the cluster opened it, the engine. Idempotent.
func (c *Cluster) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	ms := c.members
	c.members = map[string]*member{}
	c.mu.Unlock()
	c.publish()
	for _, m := range ms {
		m.close()
	}
	if c.msgs != nil {
		c.msgs.close()
	}
	err := c.dir.Close()
	if c.ownsEng {
		err = errors.Join(err, c.e.Close())
	}
	return err
}

// Transport names the data-plane transport of a server the cluster is
// connected to ("" before the first connection).
func (c *Cluster) Transport() string {
	for _, m := range c.snap.Load().ms {
		m.mu.Lock()
		cl := m.cl
		m.mu.Unlock()
		if cl != nil {
			if t := cl.Transport(); t != "" {
				return t
			}
		}
	}
	return ""
}

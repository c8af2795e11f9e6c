package master

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Leader and standby masters (StartHA): masters that share an etcd elect
// one leader through etcd's election recipe (concurrency.Election, its
// value the leader's gRPC address); the others are standbys, whose calls
// answer codes.Unavailable with a message naming the leader, until one of
// them is elected in turn.
//
//   - The leader serves only while its etcd lease is known to be alive:
//     it renews the lease every third of its TTL and serves until the TTL
//     counted from before its latest renewal was sent, which ends no later
//     than etcd's own count; it steps down (forgets its state, refuses
//     calls) as soon as its session ends. Two leaders never serve
//     together.
//   - The leader writes what a successor needs to etcd, behind the calls
//     (write-behind): the mounted segments and the committed objects
//     (size, places, pins), every FlushInterval or FlushChanges changes,
//     in transactions guarded by its election key's create revision
//     (fencing): a deposed leader's writes fail, and it steps down.
//   - A standby elected leader loads that state, rebuilds its allocators
//     from the loaded places, grants every loaded object a fresh read
//     lease and every loaded client a fresh ClientTTL, and serves.
//
// What a failover loses: the changes of the last write-behind interval
// (puts committed, removals, mounts), puts in progress (their PutEnd
// fails), read leases (replaced by fresh ones), places held for readers
// of an upserted object's old value, and the LRU order (loaded objects
// are equally old).

// Defaults of HAOptions.
const (
	// DefaultCluster is the cluster ID when none is given: Mooncake's
	// (mooncake_master's --cluster_id, its clients' MC_STORE_CLUSTER_ID).
	DefaultCluster = "mooncake_cluster"
	// DefaultHALeaseTTL is the election lease's TTL: Mooncake's master
	// view lease.
	DefaultHALeaseTTL = 5 * time.Second
	// DefaultFlushInterval is how often the leader writes its changes.
	DefaultFlushInterval = 100 * time.Millisecond
	// DefaultFlushChanges is how many changes make the leader write before
	// the interval ends.
	DefaultFlushChanges = 1024
)

// Bounds of one etcd transaction of the leader's state: etcd's default
// --max-txn-ops, and well below its default --max-request-bytes (1.5 MiB).
const (
	maxTxnOps   = 128
	maxTxnBytes = 1 << 20
)

// HAOptions configures a Service's candidacy (StartHA).
type HAOptions struct {
	// Endpoints are the etcd cluster's client endpoints (host:port, or
	// http:// URLs). Required.
	Endpoints []string
	// Cluster names the masters' keys in etcd, under
	// "mooncake-store/CLUSTER/xfer-master/" (Prefix). Default:
	// DefaultCluster.
	Cluster string
	// Addr is the gRPC address (host:port) clients dial: the election's
	// value. Required.
	Addr string
	// LeaseTTL is the election lease's TTL, rounded up to whole seconds:
	// a leader that dies is replaced within about this long. Default:
	// DefaultHALeaseTTL.
	LeaseTTL time.Duration
	// FlushInterval is how often the leader writes its changes to etcd
	// (what a failover may lose). Default: DefaultFlushInterval.
	FlushInterval time.Duration
	// FlushChanges is how many changed keys make the leader write before
	// the interval ends. Default: DefaultFlushChanges.
	FlushChanges int
	// DialTimeout bounds each etcd request. Default: the lease TTL.
	DialTimeout time.Duration
}

func (o *HAOptions) defaults() error {
	if len(o.Endpoints) == 0 {
		return errors.New("mooncake master: HA: no etcd endpoint")
	}
	if o.Addr == "" {
		return errors.New("mooncake master: HA: no address to advertise")
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = DefaultHALeaseTTL
	}
	o.LeaseTTL = ((o.LeaseTTL + time.Second - 1) / time.Second) * time.Second
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.FlushChanges <= 0 {
		o.FlushChanges = DefaultFlushChanges
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = o.LeaseTTL
	}
	return nil
}

// Prefix is where the masters of cluster keep their keys in etcd: the
// election under Prefix+"leader/", the segments under
// Prefix+"segments/NAME", the objects under Prefix+"objects/KEY".
func Prefix(cluster string) string {
	if cluster == "" {
		cluster = DefaultCluster
	}
	return "mooncake-store/" + strings.TrimSuffix(cluster, "/") + "/xfer-master/"
}

func electionPrefix(cluster string) string { return Prefix(cluster) + "leader" }

// ParseEtcdEndpoints reads etcd endpoints as Mooncake's clients and
// master give them: "etcd://HOST:PORT;HOST:PORT" (master_server_addr),
// or the list alone (--etcd_endpoints); commas separate as well as
// semicolons.
func ParseEtcdEndpoints(s string) ([]string, error) {
	rest := strings.TrimPrefix(s, "etcd://")
	var eps []string
	for _, f := range strings.FieldsFunc(rest, func(r rune) bool { return r == ';' || r == ',' }) {
		if f = strings.TrimSpace(f); f != "" {
			eps = append(eps, f)
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("etcd endpoints %q: want HOST:PORT[;HOST:PORT...]", s)
	}
	return eps, nil
}

// newEtcd returns an etcd client of endpoints, checked with one request.
func newEtcd(ctx context.Context, endpoints []string, timeout time.Duration) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: timeout,
		Context:     context.Background(),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := cli.Get(cctx, "mooncake-store/", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// monoBase anchors mono: nanoseconds on the monotonic clock.
var monoBase = time.Now()

func mono() int64 { return int64(time.Since(monoBase)) }

// term is one leadership of a Service: its election key and that key's
// create revision (the fencing compare), and until when it may serve.
type term struct {
	key   string
	rev   int64
	until *atomic.Int64 // mono nanoseconds: the lease's known end
}

// HA is a Service's candidacy: see StartHA.
type HA struct {
	s   *Service
	o   HAOptions
	cli *clientv3.Client
	log *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	leader string // the leader's address last observed; "" none
}

// StartHA makes s a candidate for leadership among the masters that
// share o's etcd and cluster: from now on s refuses calls through
// NewGRPCServer's server (codes.Unavailable, naming the leader when
// known) but while it is the leader. A Service is a candidate at most
// once. Close ends the candidacy.
func StartHA(ctx context.Context, s *Service, o HAOptions) (*HA, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cli, err := newEtcd(ctx, o.Endpoints, o.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("mooncake master: HA: %w", err)
	}
	h := &HA{s: s, o: o, cli: cli, log: s.o.Logger}
	if !s.ha.CompareAndSwap(nil, h) {
		cli.Close()
		return nil, errors.New("mooncake master: HA: the Service is a candidate already")
	}
	rctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Add(2)
	go func() {
		defer h.wg.Done()
		watchLeader(rctx, cli, electionPrefix(o.Cluster), h.log, func(_, addr string) bool {
			h.mu.Lock()
			h.leader = addr
			h.mu.Unlock()
			return true
		}, nil)
	}()
	go func() {
		defer h.wg.Done()
		h.run(rctx)
	}()
	return h, nil
}

// Options returns the candidacy's options, defaults filled in.
func (h *HA) Options() HAOptions { return h.o }

// Leading reports whether the Service is the leader and serves.
func (h *HA) Leading() bool {
	t := h.s.term.Load()
	return t != nil && mono() < t.until.Load()
}

// Leader is the leader's address last observed in etcd; "" when none is
// elected.
func (h *HA) Leader() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leader
}

// Close ends the candidacy: a leader writes its last changes, steps down
// and resigns, so that a standby takes over at once. The Service refuses
// calls from then on. Idempotent.
func (h *HA) Close() error {
	h.cancel()
	h.wg.Wait()
	return h.cli.Close()
}

// notLeader is a standby's refusal.
func (h *HA) notLeader() error {
	if l := h.Leader(); l != "" && l != h.o.Addr {
		return status.Errorf(codes.Unavailable, "mooncake master %s: not the leader (a standby): the leader is at %s", h.o.Addr, l)
	}
	return status.Errorf(codes.Unavailable, "mooncake master %s: not the leader (a standby), and no leader is elected yet", h.o.Addr)
}

// gateInterceptor lets calls through to a Service that is not a candidate
// or leads, and refuses the others; a call during which the leadership
// ended is refused too, whatever the handler answered.
func (s *Service) gateInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	h := s.ha.Load()
	if h == nil {
		return handler(ctx, req)
	}
	t := s.term.Load()
	if t == nil || mono() >= t.until.Load() {
		return nil, h.notLeader()
	}
	resp, err := handler(ctx, req)
	if s.term.Load() != t {
		return nil, status.Errorf(codes.Unavailable, "mooncake master %s: lost the leadership during the call", h.o.Addr)
	}
	return resp, err
}

// run campaigns, leads while elected, and campaigns again, until ctx
// ends.
func (h *HA) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for {
		err := h.campaign(ctx)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("mooncake master: HA: campaigning again", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, h.o.LeaseTTL/2)
	}
}

// errDeposed is a leader's write refused by the fencing compare.
var errDeposed = errors.New("deposed: the election key is no longer this master's")

// campaign runs one etcd session: it waits to be elected, leads until the
// session ends or ctx does, and returns why it ended.
func (h *HA) campaign(ctx context.Context) error {
	ttl := int64(h.o.LeaseTTL / time.Second)
	sent := mono()
	gctx, gcancel := context.WithTimeout(ctx, h.o.DialTimeout)
	g, err := h.cli.Grant(gctx, ttl)
	gcancel()
	if err != nil {
		return fmt.Errorf("grant a lease: %w", err)
	}
	until := new(atomic.Int64)
	until.Store(sent + int64(time.Duration(g.TTL)*time.Second))
	// The session's context outlives ctx, so that Close can revoke the
	// lease when ctx ended.
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	sess, err := concurrency.NewSession(h.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(ttl)), concurrency.WithContext(sctx))
	if err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), h.o.DialTimeout)
		h.cli.Revoke(rctx, g.ID)
		rcancel()
		return fmt.Errorf("session: %w", err)
	}
	defer sess.Close()
	// lost ends when the session does, or the lease is found gone; the
	// goroutines end with it (lost runs before wg.Wait).
	var wg sync.WaitGroup
	defer wg.Wait()
	lctx, lost := context.WithCancel(ctx)
	defer lost()
	wg.Go(func() {
		select {
		case <-sess.Done():
			lost()
		case <-lctx.Done():
		}
	})
	wg.Go(func() { h.renew(lctx, g.ID, until, lost) })

	e := concurrency.NewElection(sess, electionPrefix(h.o.Cluster))
	if err := e.Campaign(lctx, h.o.Addr); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	t := &term{key: e.Key(), rev: e.Rev(), until: until}
	// The key deleted (its lease revoked by hand, say) ends the
	// leadership at once, before the session notices.
	wg.Go(func() {
		for wr := range h.cli.Watch(lctx, t.key, clientv3.WithRev(t.rev)) {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					lost()
					return
				}
			}
		}
	})
	if err := h.lead(ctx, lctx, t); err != nil {
		return err
	}
	if ctx.Err() != nil {
		// Closed: resign, so that a standby need not wait for the TTL.
		rctx, rcancel := context.WithTimeout(context.Background(), h.o.DialTimeout)
		e.Resign(rctx)
		rcancel()
		return nil
	}
	return errors.New("lost the etcd session")
}

// renew renews the lease every third of its TTL, and moves until to the
// TTL counted from before each renewal was sent. A lease found gone
// calls lost.
func (h *HA) renew(ctx context.Context, id clientv3.LeaseID, until *atomic.Int64, lost func()) {
	every := h.o.LeaseTTL / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		sent := mono()
		rctx, cancel := context.WithTimeout(ctx, every)
		r, err := h.cli.KeepAliveOnce(rctx, id)
		cancel()
		switch {
		case err == nil && r.TTL > 0:
			until.Store(sent + int64(time.Duration(r.TTL)*time.Second))
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
			lost()
			return
		}
	}
}

// lead loads the state, serves and writes its changes until ctx ends
// (the session lost, or closed: closed ended) or a write is fenced off.
// It steps down before it returns.
func (h *HA) lead(closed, ctx context.Context, t *term) error {
	s := h.s
	segs, objs, err := h.load(ctx)
	if err != nil {
		return fmt.Errorf("load the state: %w", err)
	}
	n := s.becomeLeader(t, segs, objs, h.o.FlushChanges)
	h.log.Info("mooncake master: elected leader", "addr", h.o.Addr, "segments", len(segs), "objects", n,
		"etcd_key", t.key, "lease_ttl", h.o.LeaseTTL)
	tick := time.NewTicker(h.o.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if closed.Err() != nil {
				// Closed: write the last changes, then step down.
				fctx, cancel := context.WithTimeout(context.Background(), h.o.DialTimeout)
				if err := h.flush(fctx, t); err != nil {
					h.log.Warn("mooncake master: HA: the last changes were not written", "err", err)
				}
				cancel()
			}
			s.stepDown(t)
			h.log.Info("mooncake master: stepped down", "addr", h.o.Addr)
			return nil
		case <-tick.C:
		case <-s.flushKick:
		}
		if err := h.flush(ctx, t); errors.Is(err, errDeposed) {
			s.stepDown(t)
			h.log.Warn("mooncake master: stepped down: deposed (a write found the election key another's)", "addr", h.o.Addr)
			return err
		} else if err != nil && ctx.Err() == nil {
			h.log.Warn("mooncake master: HA: writing the state to etcd failed; retrying", "err", err)
		}
	}
}

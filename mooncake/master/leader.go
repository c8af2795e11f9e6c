package master

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// watchLeader follows the election under prefix: the leader is the key
// with the lowest create revision (concurrency.Election's), its value the
// leader's address. It calls on with the leader's key and address ("",
// "" when none) whenever they change, and again a moment later when on
// reports false (it could not act on them); a message on kick, or a
// second without news, makes it read them again. It returns when ctx
// ends.
func watchLeader(ctx context.Context, cli *clientv3.Client, prefix string, log *slog.Logger, on func(key, addr string) bool, kick <-chan struct{}) {
	pfx := prefix + "/"
	last, retry := "\x00", false
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := cli.Get(gctx, pfx, clientv3.WithFirstCreate()...)
		cancel()
		wait := time.Second
		var wch clientv3.WatchChan
		wctx, wcancel := context.WithCancel(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Debug("mooncake master: reading the election from etcd failed", "err", err)
			}
			wait = 250 * time.Millisecond
		} else {
			key, addr := "", ""
			if len(r.Kvs) > 0 {
				key, addr = string(r.Kvs[0].Key), string(r.Kvs[0].Value)
			}
			if cur := key + "\x00" + addr; cur != last || retry {
				retry = !on(key, addr)
				if !retry {
					last = cur
				}
			}
			if retry {
				wait = 250 * time.Millisecond
			}
			wch = cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
		}
		select {
		case <-ctx.Done():
		case <-wch:
		case <-kick:
		case <-time.After(wait):
		}
		wcancel()
	}
}

// LeaderOptions configures DialLeader. The zero value follows
// DefaultCluster's leader with Dial's defaults.
type LeaderOptions struct {
	DialOptions
	// Cluster is the masters' cluster ID (HAOptions.Cluster). Default:
	// DefaultCluster.
	Cluster string
	// OnLeader, when set, is called after each switch to a new leader
	// (not after the first connection), on the goroutine that follows the
	// election: a client mounts its segments again there (MountSegment is
	// a no-op for a segment the new leader loaded).
	OnLeader func(addr string)
	// Logger receives the switches at info level. Default: slog.Default().
	Logger *slog.Logger
}

// LeaderClient is a master's client that follows the leader elected in
// etcd (StartHA): it dials the leader, and when the leader changes, or a
// call fails as a standby or a dead master makes it fail
// (codes.Unavailable), it reads the election again and dials the new
// leader. A call in flight during the switch fails (never past its
// OpTimeout); the calls after it reach the new leader. It implements
// masterpb.MasterClient.
type LeaderClient struct {
	o      LeaderOptions
	cli    *clientv3.Client
	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	cur  *Client
	addr string
}

var _ masterpb.MasterClient = (*LeaderClient)(nil)

// DialLeader connects to etcd at endpoints, finds the leader of the
// masters of o.Cluster and dials it, waiting within ctx and OpTimeout
// for one to be elected and reachable.
func DialLeader(ctx context.Context, endpoints []string, o LeaderOptions) (*LeaderClient, error) {
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	where := fmt.Sprintf("etcd %s (cluster %s)", strings.Join(endpoints, ","), o.Cluster)
	cli, err := newEtcd(ctx, endpoints, o.OpTimeout)
	if err != nil {
		return nil, fmt.Errorf("mooncake master: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	c := &LeaderClient{o: o, cli: cli, kick: make(chan struct{}, 1), cancel: cancel}
	first := make(chan struct{})
	var once sync.Once
	// A dial to a dead leader, whose key lasts until its lease ends, is
	// given up soon, to look again.
	dialWithin := min(o.OpTimeout, 3*time.Second)
	c.wg.Go(func() {
		watchLeader(rctx, cli, electionPrefix(o.Cluster), o.Logger, func(key, addr string) bool {
			if key == "" {
				return true // none elected: keep the old connection and wait
			}
			dctx, dcancel := context.WithTimeout(rctx, dialWithin)
			mc, err := Dial(dctx, addr, o.DialOptions)
			dcancel()
			if err != nil {
				o.Logger.Debug("mooncake master: the elected leader does not answer yet", "addr", addr, "err", err)
				return false
			}
			c.mu.Lock()
			old := c.cur
			c.cur, c.addr = mc, addr
			c.mu.Unlock()
			if old == nil {
				once.Do(func() { close(first) })
				return true
			}
			old.Close()
			o.Logger.Info("mooncake master: following a new leader", "addr", addr)
			if o.OnLeader != nil {
				o.OnLeader(addr)
			}
			return true
		}, c.kick)
	})
	wctx, wcancel := context.WithTimeout(ctx, o.OpTimeout)
	defer wcancel()
	select {
	case <-first:
		return c, nil
	case <-wctx.Done():
		c.Close()
		return nil, fmt.Errorf("mooncake master: no leader elected and reachable in %s within %v: %w", where, o.OpTimeout, wctx.Err())
	}
}

// Leader is the address of the leader the client follows.
func (c *LeaderClient) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// Close closes the connections. Idempotent.
func (c *LeaderClient) Close() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	cur := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cur != nil {
		cur.Close()
	}
	return c.cli.Close()
}

// leaderCall makes a call on the current leader; a call that fails as a
// standby or a dead master makes it fail makes the client look for the
// leader again.
func leaderCall[R any](c *LeaderClient, f func(masterpb.MasterClient) (R, error)) (R, error) {
	c.mu.Lock()
	cur := c.cur
	c.mu.Unlock()
	if cur == nil {
		var zero R
		return zero, status.Error(codes.Unavailable, "mooncake master: the client is closed")
	}
	r, err := f(cur)
	if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return r, err
}

// MountSegment mounts a segment on the leader (masterpb.MasterClient).
func (c *LeaderClient) MountSegment(ctx context.Context, r *masterpb.MountSegmentRequest, opts ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CodeResponse, error) { return m.MountSegment(ctx, r, opts...) })
}

// UnmountSegment unmounts a segment on the leader (masterpb.MasterClient).
func (c *LeaderClient) UnmountSegment(ctx context.Context, r *masterpb.UnmountSegmentRequest, opts ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CodeResponse, error) {
		return m.UnmountSegment(ctx, r, opts...)
	})
}

// Ping pings on the leader (masterpb.MasterClient).
func (c *LeaderClient) Ping(ctx context.Context, r *masterpb.PingRequest, opts ...grpc.CallOption) (*masterpb.PingResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.PingResponse, error) { return m.Ping(ctx, r, opts...) })
}

// PutStart starts a put on the leader (masterpb.MasterClient).
func (c *LeaderClient) PutStart(ctx context.Context, r *masterpb.PutStartRequest, opts ...grpc.CallOption) (*masterpb.PutStartResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.PutStartResponse, error) { return m.PutStart(ctx, r, opts...) })
}

// PutEnd ends a put on the leader (masterpb.MasterClient).
func (c *LeaderClient) PutEnd(ctx context.Context, r *masterpb.PutEndRequest, opts ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CodeResponse, error) { return m.PutEnd(ctx, r, opts...) })
}

// PutRevoke revokes a put on the leader (masterpb.MasterClient).
func (c *LeaderClient) PutRevoke(ctx context.Context, r *masterpb.PutEndRequest, opts ...grpc.CallOption) (*masterpb.CodeResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CodeResponse, error) { return m.PutRevoke(ctx, r, opts...) })
}

// GetReplicaList lists replicas on the leader (masterpb.MasterClient).
func (c *LeaderClient) GetReplicaList(ctx context.Context, r *masterpb.KeysRequest, opts ...grpc.CallOption) (*masterpb.GetReplicaListResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.GetReplicaListResponse, error) {
		return m.GetReplicaList(ctx, r, opts...)
	})
}

// Exist checks keys on the leader (masterpb.MasterClient).
func (c *LeaderClient) Exist(ctx context.Context, r *masterpb.KeysRequest, opts ...grpc.CallOption) (*masterpb.ExistResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.ExistResponse, error) { return m.Exist(ctx, r, opts...) })
}

// Remove removes keys on the leader (masterpb.MasterClient).
func (c *LeaderClient) Remove(ctx context.Context, r *masterpb.RemoveRequest, opts ...grpc.CallOption) (*masterpb.RemoveResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.RemoveResponse, error) { return m.Remove(ctx, r, opts...) })
}

// RemoveByRegex removes matching keys on the leader (masterpb.MasterClient).
func (c *LeaderClient) RemoveByRegex(ctx context.Context, r *masterpb.RemoveByRegexRequest, opts ...grpc.CallOption) (*masterpb.CountResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CountResponse, error) {
		return m.RemoveByRegex(ctx, r, opts...)
	})
}

// RemoveAll removes every key on the leader (masterpb.MasterClient).
func (c *LeaderClient) RemoveAll(ctx context.Context, r *masterpb.RemoveAllRequest, opts ...grpc.CallOption) (*masterpb.CountResponse, error) {
	return leaderCall(c, func(m masterpb.MasterClient) (*masterpb.CountResponse, error) { return m.RemoveAll(ctx, r, opts...) })
}

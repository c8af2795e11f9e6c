package master

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/xferio/xfer/internal/testutil/etcdtest"
	"github.com/xferio/xfer/mooncake/master/masterpb"
)

// TestHAFencing: a leader whose election key is gone (its lease revoked,
// a successor elected) cannot write its state: its transaction fails the
// create-revision compare, and the successor's keys are untouched.
func TestHAFencing(t *testing.T) {
	ctx := context.Background()
	host := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const cluster = "fencing"
	elect := func() (*concurrency.Session, *term) {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
		if err != nil {
			t.Fatal(err)
		}
		e := concurrency.NewElection(sess, electionPrefix(cluster))
		if err := e.Campaign(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		until := new(atomic.Int64)
		until.Store(math.MaxInt64)
		return sess, &term{key: e.Key(), rev: e.Rev(), until: until}
	}
	s := New(Options{Logger: slog.New(slog.DiscardHandler), SweepInterval: -1})
	defer s.Close()
	h := &HA{s: s, cli: cli, o: HAOptions{Cluster: cluster, DialTimeout: 5 * time.Second}}
	sess1, t1 := elect()
	s.becomeLeader(t1, nil, nil, 1000)
	client := []byte("0123456789abcdef")
	if r, _ := s.MountSegment(ctx, &masterpb.MountSegmentRequest{ClientId: client, Segment: &masterpb.Segment{Name: "seg", Base: 1 << 20, Size: 1 << 20}}); r.Code != 0 {
		t.Fatal(r)
	}
	put := func(key string) {
		ps, _ := s.PutStart(ctx, &masterpb.PutStartRequest{ClientId: client, Key: key, Size: 10})
		if r, _ := s.PutEnd(ctx, &masterpb.PutEndRequest{ClientId: client, Key: key, Token: ps.Token}); r.Code != 0 {
			t.Fatal(r)
		}
	}
	put("a")
	if err := h.flush(ctx, t1); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	// Deposed: the lease revoked, a successor elected and writing.
	if _, err := cli.Revoke(ctx, sess1.Lease()); err != nil {
		t.Fatal(err)
	}
	sess1.Close()
	sess2, _ := elect()
	defer sess2.Close()
	if _, err := cli.Put(ctx, objectsPrefix(cluster)+"a", "successor's"); err != nil {
		t.Fatal(err)
	}
	s.Remove(ctx, &masterpb.RemoveRequest{Keys: []string{"a"}, Force: true})
	put("b")
	if err := h.flush(ctx, t1); !errors.Is(err, errDeposed) {
		t.Fatalf("a deposed leader's write: %v, want errDeposed", err)
	}
	r, err := cli.Get(ctx, objectsPrefix(cluster), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "successor's" {
		t.Fatalf("after a deposed leader's write, etcd holds %v: want the successor's key only", r.Kvs)
	}
}

package directory

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const testToken = "the-coordinator-token-of-this-test"

// TestCoordinatorToken: a coordinator with a token refuses writes without
// it or with another, and changes nothing; reads stay open unless
// protected; every refusal is counted and reported.
func TestCoordinatorToken(t *testing.T) {
	for _, protect := range []bool{false, true} {
		var mu sync.Mutex
		reasons := map[string]int{}
		c := NewCoordinator(CoordinatorOptions{Token: testToken, ProtectReads: protect, OnRefused: func(_, reason string, _ error) {
			mu.Lock()
			reasons[reason]++
			mu.Unlock()
		}})
		srv := httptest.NewServer(c)
		defer srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		owner := mustOpenOpts(t, srv.URL, Options{Token: testToken})
		if err := owner.Register(ctx, entry("node-a", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		for name, token := range map[string]string{"no token": "", "another token": "another-token-of-enough-length"} {
			d := mustOpenOpts(t, srv.URL, Options{Token: token})
			if err := d.Register(ctx, entry("node-a", "6.6.6.6:1")); err == nil || !strings.Contains(err.Error(), "401") {
				t.Errorf("%s: register over another node: %v, want 401", name, err)
			}
			if err := d.Deregister(ctx, "node-a"); err == nil {
				t.Errorf("%s: deregister succeeded", name)
			}
			_, err := d.Lookup(ctx, "node-a")
			if protect != (err != nil) {
				t.Errorf("%s, reads protected %v: lookup: %v", name, protect, err)
			}
		}
		// /healthz stays open; the entry is the owner's still.
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get(srv.URL + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v", err)
		}
		resp.Body.Close()
		var e Entry
		e, err = owner.Lookup(ctx, "node-a")
		if err != nil || e.Addrs[0] != "10.0.0.1:1" || c.Len() != 1 {
			t.Fatalf("the entry after the attempts: %+v %v", e, err)
		}
		mu.Lock()
		if reasons["no_proof"] == 0 || reasons["bad_proof"] == 0 || uint64(reasons["no_proof"]+reasons["bad_proof"]) != c.Refused() {
			t.Errorf("refusals %v, counted %d", reasons, c.Refused())
		}
		mu.Unlock()
	}
}

func mustOpenOpts(t *testing.T, url string, o Options) Directory {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := Open(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestEtcdAuth: with etcd's authentication on, a client without a user
// cannot open the directory nor write; one with the user and password,
// from the URL or the options, works.
func TestEtcdAuth(t *testing.T) {
	host := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + host}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "root-password"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "xfer", "xfer-password"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "xfer"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "xfer", "/xfer/", clientv3.GetPrefixRangeEnd("/xfer/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserGrantRole(ctx, "xfer", "xfer"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := Open(ctx, "etcd://"+host+"/xfer", Options{}); err == nil {
		d.Close()
		t.Fatal("opened an etcd with authentication without a user")
	}
	if d, err := Open(ctx, "etcd://xfer:wrong@"+host+"/xfer", Options{}); err == nil {
		d.Close()
		t.Fatal("opened an etcd with a wrong password")
	}
	for _, c := range []struct {
		url string
		o   Options
	}{
		{"etcd://xfer:xfer-password@" + host + "/xfer", Options{}},
		{"etcd://" + host + "/xfer", Options{Username: "xfer", Password: "xfer-password"}},
	} {
		d := mustOpenOpts(t, c.url, c.o)
		if err := d.Register(ctx, entry("node-a", "10.0.0.1:1")); err != nil {
			t.Fatal(err)
		}
		if e, err := d.Lookup(ctx, "node-a"); err != nil || e.Addrs[0] != "10.0.0.1:1" {
			t.Fatalf("lookup: %+v %v", e, err)
		}
		d.Close()
	}
}

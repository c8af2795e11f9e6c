package directory

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNode(t *testing.T) {
	srv := httptest.NewServer(NewCoordinator(CoordinatorOptions{}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs := []string{"127.0.0.1:7000"}
	n, err := OpenNode(ctx, srv.URL, "n1", Options{}, func() Entry { return Entry{Addrs: addrs, Transports: []string{"tcp"}} })
	if err != nil {
		t.Fatal(err)
	}
	other, err := Open(ctx, srv.URL, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ent, err := other.Lookup(ctx, "n1")
	if err != nil || ent.Addrs[0] != "127.0.0.1:7000" {
		t.Fatalf("lookup after OpenNode: %+v, %v", ent, err)
	}
	if _, ok := n.Registration(); !ok {
		t.Error("no registration after OpenNode")
	}
	if err := n.SetService(ctx, "kv", "127.0.0.1:7001"); err != nil {
		t.Fatal(err)
	}
	if ent, _ := other.Lookup(ctx, "n1"); ent.Services["kv"] != "127.0.0.1:7001" {
		t.Errorf("services after SetService: %v", ent.Services)
	}
	// A service that makes the entry invalid is refused, and the entry
	// keeps the services it had.
	if err := n.SetService(ctx, "Not A Name!", "127.0.0.1:1"); err == nil {
		t.Error("SetService took an invalid name")
	}
	if got := n.Entry().Services; len(got) != 1 || got["kv"] == "" {
		t.Errorf("services after a refused SetService: %v", got)
	}
	addrs = []string{"127.0.0.1:7002"}
	if err := n.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if ent, _ := other.Lookup(ctx, "n1"); ent.Addrs[0] != "127.0.0.1:7002" {
		t.Errorf("addrs after Publish: %v", ent.Addrs)
	}
	if err := n.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Lookup(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("lookup after Close: %v, want ErrNotFound", err)
	}
	if err := n.Publish(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Publish after Close: %v, want net.ErrClosed", err)
	}
}

func TestNodeP2P(t *testing.T) {
	n, err := OpenNode(context.Background(), "p2p", "n1", Options{}, func() Entry { return Entry{} })
	if err != nil {
		t.Fatal(err)
	}
	if n.Directory() != nil || n.Publish(context.Background()) != nil || n.Close(time.Second) != nil {
		t.Error("a p2p node has a directory or fails")
	}
	var none *Node
	if none.Directory() != nil || none.ID() != "" || none.Publish(context.Background()) != nil || none.Close(time.Second) != nil {
		t.Error("a nil Node is not empty")
	}
}

func TestAdvertisedAddrs(t *testing.T) {
	if got := AdvertisedAddrs("10.1.2.3:99"); len(got) != 1 || got[0] != "10.1.2.3:99" {
		t.Errorf("a specific address: %v", got)
	}
	got := AdvertisedAddrs("0.0.0.0:99")
	if len(got) == 0 || len(got) > MaxAddrs {
		t.Fatalf("a wildcard gave %d addresses", len(got))
	}
	seenLoop := false
	for _, a := range got {
		if !strings.HasSuffix(a, ":99") {
			t.Errorf("%s lost the port", a)
		}
		ip := net.ParseIP(strings.Trim(a[:strings.LastIndex(a, ":")], "[]"))
		if ip.IsLoopback() {
			seenLoop = true
		} else if seenLoop {
			t.Errorf("%v: a global address after a loopback one", got)
		}
	}
}

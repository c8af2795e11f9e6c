package kv_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/kv"
)

// Two KV servers register in a directory (a coordinator here; etcd:// in
// production), and a Cluster spreads keys over them by consistent
// hashing. docs/KV.md shows this function's body.
func ExampleDialCluster() {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	var served []chan error
	for _, id := range []string{"kv-a", "kv-b"} {
		srv, err := kv.NewServer(ctx, kv.ServerOptions{Engine: xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 16,
			Directory: coord.URL, NodeID: id}}) // the server's engine registers the node
		if err != nil {
			panic(err)
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		if err := srv.Advertise(ctx, lis.Addr().String()); err != nil { // Serve does this too
			panic(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, lis) }()
		served = append(served, done)
	}

	c, err := kv.DialCluster(ctx, kv.ClusterOptions{Directory: coord.URL,
		Client: kv.ClientOptions{EngineConfig: xfer.Config{MemoryMB: 16}}})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Servers())
	for _, k := range []string{"apple", "banana", "cherry"} {
		if err := c.Put(ctx, k, []byte("a value of "+k)); err != nil {
			panic(err)
		}
	}
	v, err := c.Get(ctx, "banana") // from the server the key hashes to
	fmt.Printf("%s %v\n", v, err)
	c.Close()
	stop()
	for _, done := range served {
		<-done
	}
	// Output:
	// [kv-a kv-b]
	// a value of banana <nil>
}

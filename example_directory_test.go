package xfer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
)

// Two engines that find each other through a directory (here a coordinator
// on loopback; an etcd:// URL works the same): one registers as node
// "mem-1" and exports a region, the other dials it by node ID and finds the
// region by name. docs/DIRECTORY.md shows this function's body.
func ExampleEngine_DialNode() {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Node mem-1 registers itself on Open and leaves on Close.
	mem1, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Secret: "s3cret-s3cret-s3cret",
		Directory: coord.URL, NodeID: "mem-1", MemoryMB: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer mem1.Close()
	region, err := mem1.NewRegion(1<<20, xfer.AccessRead)
	if err != nil {
		log.Fatal(err)
	}
	mem1.Export("pages", region) // listed in mem-1's entry: name and size

	// Another engine resolves mem-1 and dials it; the handshake
	// authenticates it with the secret, as a Dial by address does.
	cli, err := xfer.Open(ctx, xfer.Config{Secret: "s3cret-s3cret-s3cret", Directory: coord.URL, MemoryMB: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	entry, err := cli.LookupNode(ctx, "mem-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(entry.NodeID, entry.Exports)
	peer, err := cli.DialNode(ctx, "mem-1")
	if err != nil {
		log.Fatal(err)
	}
	desc, ok := peer.Region("pages") // the descriptor, key included, came in the handshake
	fmt.Println(ok, desc.Len)

	_, err = cli.DialNode(ctx, "mem-2")
	fmt.Println(errors.Is(err, xfer.ErrUnknownNode))
	// Output:
	// mem-1 [{pages 1048576}]
	// true 1048576
	// true
}

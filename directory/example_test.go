package directory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/xferio/xfer/directory"
)

// A node registers itself in a coordinator and looks another up. The
// coordinator runs here in the same process; in a cluster it is
// `xfer coordinator`, and the URL may as well be etcd://HOST:2379/PREFIX.
func Example() {
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	ctx := context.Background()

	d, err := directory.Open(ctx, coord.URL, directory.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	err = d.Register(ctx, directory.Entry{NodeID: "mem-1", Addrs: []string{"10.0.0.1:7472"}})
	if err != nil {
		log.Fatal(err)
	}
	e, err := d.Lookup(ctx, "mem-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.NodeID, e.Addrs)
	_, err = d.Lookup(ctx, "mem-2")
	fmt.Println(errors.Is(err, directory.ErrNotFound))
	// Output:
	// mem-1 [10.0.0.1:7472]
	// true
}

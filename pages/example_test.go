package pages_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/pages"
)

// A pipeline keeps 8 fetches in flight: take the oldest, start the next.
// The server runs here in the same process; elsewhere it is
// `xfer pages serve`.
func ExamplePipeline() {
	ctx := context.Background()
	srv, err := pages.NewServer(ctx, pages.ServerConfig{Engine: xfer.Config{Listen: "127.0.0.1:0"}, Size: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	for off := 0; off < len(srv.Memory()); off += srv.PageSize() {
		binary.LittleEndian.PutUint64(srv.Memory()[off:], uint64(off)) // each page names itself
	}

	c, err := pages.NewClient(ctx, pages.ClientConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.AddNode(ctx, srv.Addr(), 0); err != nil {
		log.Fatal(err)
	}
	bufs, err := c.Alloc(8)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Free(bufs)
	p, err := c.NewPipeline(len(bufs))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	const pageCount = 100
	next, good := uint64(0), 0
	for _, b := range bufs {
		if err := p.Start(next*pages.PageSize4K, b.Bytes()); err != nil {
			log.Fatal(err)
		}
		next++
	}
	for p.InFlight() > 0 {
		gpa, buf, err := p.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if binary.LittleEndian.Uint64(buf) == gpa {
			good++
		}
		if next < pageCount { // the buffer is free again: fetch the next page into it
			if err := p.Start(next*pages.PageSize4K, buf); err != nil {
				log.Fatal(err)
			}
			next++
		}
	}
	fmt.Println(good, "pages fetched and checked;", c.Latency().Count, "latencies recorded")
	// Output:
	// 100 pages fetched and checked; 100 latencies recorded
}

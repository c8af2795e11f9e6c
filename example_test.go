package xfer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/xferio/xfer"
)

// Two engines in one program: the target exports a region, the initiator
// dials it and moves bytes with one-sided WRITE and READ, a write with
// notification, a batch, and a two-sided message. README.md shows this
// function's body.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The target: an engine that listens and exports a region.
	srv, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Secret: "s3cret-s3cret-s3cret"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	region, err := srv.NewRegion(64<<20, xfer.AccessReadWrite) // mmap'd, registered
	if err != nil {
		log.Fatal(err)
	}
	srv.Export("data", region)

	// The initiator.
	cli, err := xfer.Open(ctx, xfer.Config{Secret: "s3cret-s3cret-s3cret"})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	peer, err := cli.Dial(ctx, srv.Addr()) // handshake: version, auth, transport
	if err != nil {
		log.Fatal(err)
	}
	dst, _ := peer.Region("data") // descriptor: id, range, key, rights

	// Operations move registered memory: a zero-copy view of the pool.
	buf, err := cli.Alloc(1 << 20)
	if err != nil {
		log.Fatal(err)
	}
	// Fill it in place, write it (one-sided), and read it back.
	copy(buf.Bytes(), "hello, region")
	if err := peer.Write(ctx, buf.Bytes(), dst.At(0)); err != nil {
		log.Fatal(err)
	}
	if err := peer.Read(ctx, buf.Bytes()[4096:4096+13], dst.At(0)); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read back %q\n", buf.Bytes()[4096:4096+13])

	// The target's WaitNotify sees 42 once the data is in place.
	if err := peer.WriteNotify(ctx, buf.Bytes()[:4096], dst.At(0), 42); err != nil {
		log.Fatal(err)
	}
	n, err := srv.WaitNotify(ctx)
	fmt.Println("notified:", n.Value, n.Len, err)

	// Many operations, one handle, an error per operation.
	ops := []xfer.Op{
		{Kind: xfer.OpWrite, Local: buf.Bytes()[:4096], Remote: dst.At(0)},
		{Kind: xfer.OpRead, Local: buf.Bytes()[4096:8192], Remote: dst.At(8192)},
	}
	batch := peer.Submit(ops)
	fmt.Println("batch:", batch.Wait(ctx), ops[0].Err, ops[1].Err)

	// Two-sided: Send takes a buffer in registered memory; Recv copies the
	// message into any buffer.
	copy(buf.Bytes(), "ping")
	if err := peer.Send(ctx, buf.Bytes()[:4]); err != nil {
		log.Fatal(err)
	}
	from, err := srv.Accept(ctx)
	if err != nil {
		log.Fatal(err)
	}
	msg := make([]byte, 64)
	m, err := from.Recv(ctx, msg)
	fmt.Printf("received %q %v\n", msg[:m], err)
	// Output:
	// read back "hello, region"
	// notified: 42 4096 <nil>
	// batch: <nil> <nil> <nil>
	// received "ping" <nil>
}

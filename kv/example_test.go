package kv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/kv"
)

// A server and a client in one program: the client's GET has the server
// write the value into the client's registered buffer.
func Example() {
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	srv, err := kv.NewServer(ctx, kv.ServerOptions{Engine: xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 16}})
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()

	c, err := kv.Dial(ctx, "http://"+lis.Addr().String(), kv.ClientOptions{EngineConfig: xfer.Config{MemoryMB: 16}})
	if err != nil {
		panic(err)
	}
	if err := c.Put(ctx, "mykey", []byte("hello world")); err != nil {
		panic(err)
	}
	v, err := c.Get(ctx, "mykey")
	fmt.Printf("%s %v\n", v, err)

	// Zero copy: fill a registered buffer in place, PUT it, GET into it.
	buf, _ := c.Engine().Alloc(1 << 20)
	copy(buf.Bytes(), "a large value...")
	if err := c.PutBuffer(ctx, "big", buf, 1<<20); err != nil {
		panic(err)
	}
	n, err := c.GetInto(ctx, "big", buf)
	fmt.Println(n, err)
	c.Engine().Free(buf)
	little, _ := c.Engine().Alloc(4096)
	_, err = c.GetInto(ctx, "big", little) // too small for the value
	var small *kv.BufferTooSmallError
	if errors.As(err, &small) {
		fmt.Println("needs", small.Needed, "bytes")
	}
	c.Engine().Free(little)

	_, err = c.Get(ctx, "missing")
	fmt.Println(errors.Is(err, kv.ErrNotFound))

	c.Close()
	stop()
	<-served
	// Output:
	// hello world <nil>
	// 1048576 <nil>
	// needs 1048576 bytes
	// true
}

package connector_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/connector"
)

// A producer and a consumer in one program, on loopback tcp: Put stores
// bytes, a tensor and an object in the producer's pool and returns their
// metadata; Get, handed that metadata, moves each value into the
// consumer's pool and returns it as a Buffer to read in place.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	prod, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleProducer,
		Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	cons, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleConsumer,
		Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()

	// Bytes. The metadata says where the value is and what it is; an
	// orchestrator hands it to the consumer (MarshalBinary, or JSON).
	size, meta, err := prod.Put(ctx, "thinker", "talker", "req-1", []byte("hello, stage"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("put", size, "bytes as", meta.Kind)
	buf, n, err := cons.Get(ctx, "thinker", "talker", "req-1", &meta)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("got %d bytes: %q\n", n, buf.Bytes())
	buf.Release() // hands the memory back to the consumer's pool

	// A tensor: a dtype, a row-major shape, and its bytes.
	data := make([]byte, 2*3*4)
	t := connector.Tensor{DType: connector.F32, Shape: []int64{2, 3}, Data: data}
	vals, _ := connector.View[float32](t)
	for i := range vals {
		vals[i] = float32(i) / 2
	}
	_, meta, err = prod.Put(ctx, "thinker", "talker", "hidden", t)
	if err != nil {
		log.Fatal(err)
	}
	buf, _, err = cons.Get(ctx, "thinker", "talker", "hidden", &meta)
	if err != nil {
		log.Fatal(err)
	}
	got, err := buf.Tensor()
	if err != nil {
		log.Fatal(err)
	}
	f, _ := connector.View[float32](got)
	fmt.Println(got.DType, got.Shape, f)
	buf.Release()

	// An object: any Go value, as CBOR.
	type params struct {
		Temperature float64
		Stop        []string
	}
	_, meta, err = prod.Put(ctx, "thinker", "talker", "params", params{0.7, []string{"</s>"}})
	if err != nil {
		log.Fatal(err)
	}
	buf, _, err = cons.Get(ctx, "thinker", "talker", "params", &meta)
	if err != nil {
		log.Fatal(err)
	}
	var p params
	err = buf.Decode(&p)
	fmt.Printf("%+v %v\n", p, err)
	buf.Release()

	// A value is taken once by default: it is gone after its Get.
	_, _, err = cons.Get(ctx, "thinker", "talker", "req-1", &connector.Meta{Producer: prod.Addr()}, connector.NoWait())
	fmt.Println(errors.Is(err, connector.ErrNotFound))
	// Output:
	// put 12 bytes as bytes
	// got 12 bytes: "hello, stage"
	// F32 [2 3] [0 0.5 1 1.5 2 2.5]
	// {Temperature:0.7 Stop:[</s>]} <nil>
	// true
}

// Zero copy: AllocTensor hands out a tensor's memory in the producer's
// registered pool; the producer fills it in place through a typed view and
// PutBuffer publishes it without copying it.
func Example_zeroCopy() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleProducer,
		Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	cons, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleConsumer,
		Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()

	b, err := prod.AllocTensor(ctx, connector.F32, []int64{1024, 256})
	if err != nil {
		log.Fatal(err)
	}
	t, _ := b.Tensor() // t.Data is the pool's memory
	v, err := connector.View[float32](t)
	if err != nil {
		log.Fatal(err)
	}
	for i := range v {
		v[i] = float32(i % 7)
	}
	// PutBuffer takes b over: do not touch t or v after it.
	size, meta, err := prod.PutBuffer(ctx, "encoder", "decoder", "feats", b)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", size, "bytes without a copy")

	got, _, err := cons.Get(ctx, "encoder", "decoder", "feats", &meta)
	if err != nil {
		log.Fatal(err)
	}
	defer got.Release()
	gt, _ := got.Tensor()
	gv, _ := connector.View[float32](gt)
	fmt.Println(gt.Shape, gv[:8])
	// Output:
	// published 1048576 bytes without a copy
	// [1024 256] [0 1 2 3 4 5 6 0]
}

// One producer, three consumers of one key: Put names how many consumers
// take the value, and the producer frees its slot after the last one.
func Example_oneToMany() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleProducer,
		Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()

	_, meta, err := prod.Put(ctx, "prefill", "decode", "kv-7", []byte("shared prefix"), connector.Consumers(3))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		cons, err := connector.Open(ctx, connector.Config{
			Role:   connector.RoleConsumer,
			Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16},
		})
		if err != nil {
			log.Fatal(err)
		}
		b, _, err := cons.Get(ctx, "prefill", "decode", "kv-7", &meta)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("consumer %d: %s\n", i, b.Bytes())
		b.Release()
		cons.Close() // it syncs with the producer: its release has arrived
	}
	h := prod.Health()
	fmt.Println("served", h.Served, "slots", h.Slots, "pool in use", h.PoolUsed)
	// Output:
	// consumer 0: shared prefix
	// consumer 1: shared prefix
	// consumer 2: shared prefix
	// served 3 slots 0 pool in use 0
}

// Partial metadata: a consumer that knows only the producer's address (or
// has it as Config.Producer and is handed nothing) asks the producer for
// the rest. Such a Get may come before the Put: it waits for it.
func Example_partialMetadata() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleProducer,
		Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()
	cons, err := connector.Open(ctx, connector.Config{
		Role:     connector.RoleConsumer,
		Producer: prod.Addr(), // the producer a Get without an address dials
		Engine:   xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()

	// Only the address.
	got := make(chan string)
	go func() {
		b, _, err := cons.Get(ctx, "a", "b", "late", &connector.Meta{Producer: prod.Addr()})
		if err != nil {
			got <- err.Error()
			return
		}
		defer b.Release()
		got <- fmt.Sprintf("%v %v %d bytes", b.Meta().Kind, b.Meta().DType, b.Size())
	}()
	time.Sleep(50 * time.Millisecond) // the Get waits for the Put
	t := connector.Tensor{DType: connector.BF16, Shape: []int64{4, 8}, Data: make([]byte, 64)}
	if _, _, err := prod.Put(ctx, "a", "b", "late", t); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)

	// No metadata at all: Config.Producer.
	if _, _, err := prod.Put(ctx, "a", "b", "k", []byte("xyz")); err != nil {
		log.Fatal(err)
	}
	b, n, err := cons.Get(ctx, "a", "b", "k", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d %s\n", n, b.Bytes())
	b.Release()
	// Output:
	// tensor BF16 64 bytes
	// 3 xyz
}

// Health: the counters and pool use of a connector, to log or export.
func Example_health() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := connector.Open(ctx, connector.Config{
		Role:   connector.RoleProducer,
		Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP, MemoryMB: 16},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer prod.Close()

	prod.Put(ctx, "a", "b", "k1", make([]byte, 4096))
	prod.Put(ctx, "a", "b", "k2", make([]byte, 100), connector.Retain())
	_, _, err = prod.Put(ctx, "a", "b", "huge", make([]byte, 32<<20))
	fmt.Println(errors.Is(err, connector.ErrTooLarge))
	removed, _ := prod.Cleanup("a", "b", "k1")
	fmt.Println("cleanup:", removed)

	h := prod.Health()
	fmt.Println(h.Role, h.Puts, h.BytesPut, h.Errors, h.Slots, h.PoolSize>>20, "MiB")
	// Output:
	// true
	// cleanup: true
	// producer 2 4196 1 1 16 MiB
}

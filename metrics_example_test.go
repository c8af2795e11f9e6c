package xfer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer"
)

// Example_metrics gives an engine a registry of the program's own (serve
// it with promhttp.HandlerFor), and reads the peer's counters back after
// one WRITE.
func Example_metrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	server, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	server.Export("pool", server.DefaultRegion())
	client, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1, Metrics: reg})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	peer, err := client.Dial(ctx, server.Addr())
	if err != nil {
		log.Fatal(err)
	}
	dst, _ := peer.Region("pool")
	buf, _ := client.Alloc(4096)
	if err := peer.Write(ctx, buf.Bytes(), dst.At(0)); err != nil {
		log.Fatal(err)
	}
	// reg now has xfer_ops_total{op="write",transport="tcp"} 1 and
	// xfer_sent_bytes_total{transport="tcp"} 4096; the status says the same
	// of the peer.
	st := client.Status().Peers[0]
	fmt.Println(st.Transport, st.Ops, st.Bytes)
	// Output: tcp 1 4096
}

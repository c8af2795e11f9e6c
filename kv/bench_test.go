package kv

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/xferio/xfer"
)

// BenchmarkGet measures GETs of one key from 1 and 16 clients, in process
// (server and clients in one process, over real loopback connections).
func BenchmarkGet(b *testing.B) {
	for _, tr := range transports {
		for _, mode := range modes {
			for _, size := range []int{4 << 10, 1 << 20} {
				for _, conc := range []int{1, 16} {
					b.Run(fmt.Sprintf("%s/%s/%dB/c%d", tr, mode, size, conc), func(b *testing.B) {
						benchGet(b, tr, mode, size, conc, conc)
					})
				}
				b.Run(fmt.Sprintf("%s/%s/%dB/c16-shared", tr, mode, size), func(b *testing.B) {
					benchGet(b, tr, mode, size, 16, 1)
				})
			}
		}
	}
}

// benchClients starts a server and returns conc workers' clients, nc of
// them distinct, each worker with a buffer of size bytes from its client.
// A client's pool holds its workers' buffers twice over (a Get of a large
// value may take a buffer of its own too).
func benchClients(b *testing.B, tr xfer.Policy, mode string, size, conc, nc int) ([]*Client, []xfer.Buffer) {
	return benchClientsSecret(b, tr, mode, size, conc, nc, "")
}

// benchClientsSecret is benchClients with a shared secret on the server
// and the clients ("" for none).
func benchClientsSecret(b *testing.B, tr xfer.Policy, mode string, size, conc, nc int, secret string) ([]*Client, []xfer.Buffer) {
	s := startServer(b, ServerOptions{Engine: xfer.Config{MemoryMB: 64, Secret: secret}})
	cs := make([]*Client, conc)
	bufs := make([]xfer.Buffer, conc)
	poolMB := max(16, 2*((conc+nc-1)/nc)*size>>20)
	for i := range cs {
		if i < nc {
			cs[i] = dialOpts(b, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: poolMB, Secret: secret}, Requests: mode})
		} else {
			cs[i] = cs[i%nc]
		}
		var err error
		if bufs[i], err = cs[i].Engine().Alloc(size); err != nil {
			b.Fatal(err)
		}
	}
	return cs, bufs
}

// benchGet runs conc goroutines that share nc clients.
func benchGet(b *testing.B, tr xfer.Policy, mode string, size, conc, nc int) {
	ctx := context.Background()
	cs, bufs := benchClients(b, tr, mode, size, conc, nc)
	if err := cs[0].PutBuffer(ctx, "k", bufs[0], size); err != nil {
		b.Fatal(err)
	}
	runWorkers(b, size, cs, func(i int, c *Client) error {
		_, err := c.GetInto(ctx, "k", bufs[i])
		return err
	})
}

// runWorkers runs one goroutine per client of cs, each calling op b.N/len(cs)+1
// times, and reports the operations per second.
func runWorkers(b *testing.B, size int, cs []*Client, op func(i int, c *Client) error) {
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/len(cs) + 1
	for i, c := range cs {
		wg.Go(func() {
			for range per {
				if err := op(i, c); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(per*len(cs))/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkPut measures PUTs of one key from 1 and 16 clients, in process,
// of an inline value (4 KiB) and of one the server reads (1 MiB).
func BenchmarkPut(b *testing.B) {
	for _, tr := range transports {
		for _, mode := range modes {
			for _, size := range []int{4 << 10, 1 << 20} {
				for _, conc := range []int{1, 16} {
					b.Run(fmt.Sprintf("%s/%s/%dB/c%d", tr, mode, size, conc), func(b *testing.B) {
						benchPut(b, tr, mode, size, conc)
					})
				}
			}
		}
	}
}

// benchPut runs conc goroutines, each with a client of its own.
func benchPut(b *testing.B, tr xfer.Policy, mode string, size, conc int) {
	ctx := context.Background()
	cs, bufs := benchClients(b, tr, mode, size, conc, conc)
	runWorkers(b, size, cs, func(i int, c *Client) error {
		return c.PutBuffer(ctx, "k", bufs[i], size)
	})
}

// BenchmarkAuth measures what a secret costs a 4 KiB GET from one client
// on tcp, on each request path: off and on in the same run. With a secret
// both paths' connections authenticate once, and the calls cost nothing
// more.
func BenchmarkAuth(b *testing.B) {
	for _, mode := range modes {
		for _, secret := range []string{"", "the-benchmark-secret-of-the-kv"} {
			b.Run(fmt.Sprintf("%s/secret=%v", mode, secret != ""), func(b *testing.B) {
				ctx := context.Background()
				cs, bufs := benchClientsSecret(b, xfer.PolicyTCP, mode, 4<<10, 1, 1, secret)
				if err := cs[0].PutBuffer(ctx, "k", bufs[0], 4<<10); err != nil {
					b.Fatal(err)
				}
				runWorkers(b, 4<<10, cs, func(i int, c *Client) error {
					_, err := c.GetInto(ctx, "k", bufs[i])
					return err
				})
			})
		}
	}
}

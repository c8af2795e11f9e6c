package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
)

// Many rdma_cm connection setups, four at a time against one server, each
// checked with a WRITE, all come up (a transient failure is retried and
// logged). The server releases each connection when its dialer leaves (an
// earlier build held them all and ran the VM out of memory, and siw then
// refused connects with EADDRNOTAVAIL), and its acceptor takes each
// dialer's connection events in whatever order they come.
func TestCMSetupRepeated(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 4, RDMA: verbs.Config{Device: dev, UseCM: true}}
	srv := openServer(ctx, t, cfg)
	target, err := srv.NewRegion(4096, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	// Four dialers at a time, so that setups overlap on the server's side.
	const dialers, setups = 4, 20
	var wg sync.WaitGroup
	var retries atomic.Uint64
	errs := make(chan error, dialers)
	for d := range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range setups {
				if err := setupOnce(ctx, cfg, srv.Addr(), target, d*8, byte(k+1), &retries); err != nil {
					errs <- fmt.Errorf("dialer %d, setup %d of %d: %w", d, k+1, setups, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d setups, %d retried", dialers*setups, retries.Load())
}

// eachSetup runs f as a subtest for each way a connection's QPs are set
// up: exchanged in the handshake ("direct") and with rdma_cm. dev is the
// device under test.
func eachSetup(t *testing.T, f func(t *testing.T, dev string, cm bool)) {
	for _, cm := range []bool{false, true} {
		name := "direct"
		if cm {
			name = "rdma_cm"
		}
		t.Run(name, func(t *testing.T) { f(t, testutil.RequireVerbs(t), cm) })
	}
}

// openServer opens a listening engine, closed when the test ends.
func openServer(ctx context.Context, t *testing.T, cfg xfer.Config) *xfer.Engine {
	t.Helper()
	srv, err := xfer.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// setupOnce opens an engine, dials addr and writes v to target[off:off+8],
// then closes the engine, adding its setup retries to retries.
func setupOnce(ctx context.Context, cfg xfer.Config, addr string, target *xfer.Region, off int, v byte, retries *atomic.Uint64) error {
	cli, err := dialWrite(ctx, cfg, addr, target, off, v)
	if err != nil {
		return err
	}
	retries.Add(cli.SetupRetries())
	return cli.Close()
}

// dialWrite opens an engine, dials addr, writes v to target[off:off+8] and
// checks that it landed. It returns the engine, still connected.
func dialWrite(ctx context.Context, cfg xfer.Config, addr string, target *xfer.Region, off int, v byte) (_ *xfer.Engine, err error) {
	cli, err := xfer.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cli.Close()
		}
	}()
	p, err := cli.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	buf, err := cli.Alloc(8)
	if err != nil {
		return nil, err
	}
	for i := range buf.Bytes() {
		buf.Bytes()[i] = v
	}
	if err := p.Write(ctx, buf.Bytes(), target.Desc().At(uint64(off))); err != nil {
		return nil, err
	}
	if got := target.Bytes()[off : off+8]; !bytes.Equal(got, buf.Bytes()) {
		return nil, fmt.Errorf("the write did not land: % x", got)
	}
	return cli, nil
}

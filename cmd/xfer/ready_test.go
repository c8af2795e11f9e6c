package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestServeReadyAtOnce: a peer that dials `xfer serve` the moment its port
// opens, before the process has filled and exported its region, is held
// until it has: 50 of 50 find the region and read from it, over tcp and
// over shm. The first of each is a real `xfer bench --peer`.
func TestServeReadyAtOnce(t *testing.T) {
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			serveReadyAtOnce(t, transport, 32, 50)
		})
	}
}

// TestServeReadyRDMA is TestServeReadyAtOnce in the RDMA VM (make
// verbs-test), with a pool of 512 MiB: registering it on SoftRoCE takes
// long enough that a bench started seconds after the server used to find
// no region.
func TestServeReadyRDMA(t *testing.T) {
	dev := vmDevice(t)
	serveReadyAtOnce(t, "rdma", 512, 3, "RDMA_DEVICE_NAME="+dev)
}

// serveReadyAtOnce starts `xfer serve` rounds times, each on a port picked
// beforehand, and dials it the moment the port accepts a connection: the
// first round with `xfer bench`, the others with an engine of the test's.
func serveReadyAtOnce(t *testing.T, transport string, memoryMB, rounds int, env ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := xfer.Open(ctx, xfer.Config{Transport: xfer.Policy(transport), MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	buf, err := cli.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rounds {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, 1)[0]))
		serve := exec.Command(xferBinary(t), "serve", "--listen", addr, "--transport", transport, "--memory-mb", strconv.Itoa(memoryMB))
		serve.Env = cleanEnv(env...)
		var serveOut, serveErr syncBuffer
		serve.Stdout, serve.Stderr = &serveOut, &serveErr
		if err := serve.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() {
			serve.Process.Signal(syscall.SIGTERM)
			serve.Wait()
		}
		if err := waitPort(ctx, addr); err != nil {
			stop()
			t.Fatalf("round %d: %v; serve's stderr:\n%s", i, err, serveErr.String())
		}
		if i == 0 {
			bench := exec.CommandContext(ctx, xferBinary(t), "bench", "--peer", addr, "--transport", transport,
				"--op", "read", "--size", "4KiB", "--iters", "100")
			bench.Env = cleanEnv(env...)
			var stderr bytes.Buffer
			bench.Stderr = &stderr
			if err := bench.Run(); err != nil {
				stop()
				t.Fatalf("round %d: xfer bench the moment serve's port opened: %v\n%s", i, err, stderr.String())
			}
		} else if err := readDefault(ctx, cli, addr, buf.Bytes()); err != nil {
			stop()
			t.Fatalf("round %d: %v", i, err)
		}
		stop()
		if !strings.HasPrefix(serveOut.String(), serveBanner) {
			t.Fatalf("round %d: serve printed %q, not its listening line", i, serveOut.String())
		}
	}
}

// waitPort returns once addr accepts a TCP connection (which it closes at
// once: a port check, as an operator's script makes), or fails when ctx
// ends first.
func waitPort(ctx context.Context, addr string) error {
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never accepted a connection: %w", addr, err)
		case <-time.After(time.Millisecond):
		}
	}
}

// readDefault dials addr, finds the region serve exports and reads a page
// of it into b.
func readDefault(ctx context.Context, e *xfer.Engine, addr string, b []byte) error {
	p, err := e.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer p.Close()
	d, ok := p.Region(defaultRegionName)
	if !ok {
		return fmt.Errorf("peer %s exports no region named %q", addr, defaultRegionName)
	}
	return p.Read(ctx, b, d.At(0))
}

package kv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testmain"
)

// TestMain fails the package's tests if a goroutine or a file descriptor is
// left behind. Run
// with XFER_KV_PUT_LOOP=ADDR, the test binary is instead a client that PUTs
// large values until it is killed (TestClientDiesMidPut); with
// XFER_KV_CLUSTER_SERVER, a KV server registered in a directory
// (TestClusterLosesServer); with XFER_KV_SERVER, a KV server that prints
// its address (TestServerProcessGoneOrStopped); with XFER_KV_DISK_SERVER,
// one with a disk tier (TestDiskTierKill).
func TestMain(m *testing.M) {
	if addr := os.Getenv("XFER_KV_PUT_LOOP"); addr != "" {
		if err := putLoop(addr); err != nil {
			fmt.Fprintln(os.Stderr, "put loop:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if policy := os.Getenv(serverProcEnv); policy != "" {
		if err := serverProcess(policy); err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(diskServerEnv); spec != "" {
		if err := diskServerProcess(spec); err != nil {
			fmt.Fprintln(os.Stderr, "disk server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(clusterServerEnv); spec != "" {
		if err := clusterServer(spec); err != nil {
			fmt.Fprintln(os.Stderr, "cluster server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testmain.Run(m)
}

// putLoopSize is the size of the values the put loop stores.
const putLoopSize = 16 << 20

func putLoop(addr string) error {
	ctx := context.Background()
	c, err := Dial(ctx, addr, ClientOptions{EngineConfig: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 64}})
	if err != nil {
		return err
	}
	buf, err := c.Engine().Alloc(putLoopSize)
	if err != nil {
		return err
	}
	for i := 1; ; i++ {
		copy(buf.Bytes(), bytes.Repeat([]byte{byte(i)}, putLoopSize))
		if err := c.PutBuffer(ctx, "k", buf, putLoopSize); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/transport/verbs"
)

// When a dialer goes away, the acceptor's engine frees the connection's QPs,
// CM IDs and ring at once, not when the engine closes: a server that outlives
// its clients must not hold their connections. With one client connected
// throughout (the device's CQ and the pool's registration stay), a second
// one comes and goes: every verbs object count must come back to what it
// was before the second one dialed.
func TestDialerGoneReleased(t *testing.T) {
	eachSetup(t, func(t *testing.T, dev string, cm bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cfg := xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 4, RDMA: verbs.Config{Device: dev, UseCM: cm}}
		srv := openServer(ctx, t, cfg)
		client := func(v byte) *xfer.Engine {
			cli, err := dialWrite(ctx, cfg, srv.Addr(), srv.DefaultRegion(), 0, v)
			if err != nil {
				t.Fatal(err)
			}
			return cli
		}
		defer client(1).Close()
		base := ibv.Live()
		client(2).Close()
		for {
			live := ibv.Live()
			if live == base {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the server holds the connection of a dialer that went away: %+v, had %+v before it", live, base)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

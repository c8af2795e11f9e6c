package connector

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/xferio/xfer"
)

// TestWaiterServedWhenClaimEnds: a consumer whose get waits because another
// consumer holds the value's only take gets the value once that claim ends
// without the value taken (here: the other consumer's connection fails).
func TestWaiterServedWhenClaimEnds(t *testing.T) {
	for _, pull := range []Pull{PullRead, PullWrite} {
		t.Run(pull.String(), func(t *testing.T) {
			p, c := pair(t, tport{policy: xfer.PolicyTCP}, pull, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			want := []byte("one take")
			if _, _, err := p.Put(ctx, "a", "b", "k", want); err != nil {
				t.Fatal(err)
			}

			// A raw consumer claims the value (a get by read) and never
			// finishes: it reads the answer and goes away.
			eng, peer, msg := rawPeer(t, ctx, xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 1}, p.Addr())
			get := appendGet(msg[:0], 1, 0, "a/b/k", xfer.RemoteAddr{}, 0)
			if err := peer.Send(ctx, get); err != nil {
				t.Fatal(err)
			}
			ans := make([]byte, maxControl)
			n, err := peer.Recv(ctx, ans)
			if err != nil {
				t.Fatal(err)
			}
			if rep, err := parseReply(ans[:n]); err != nil || rep.status != statusOK {
				t.Fatalf("the raw consumer's claim: %+v, %v", rep, err)
			}

			got := make(chan error, 1)
			go func() {
				b, _, err := c.Get(ctx, "a", "b", "k", nil)
				if err == nil {
					if !bytes.Equal(b.Bytes(), want) {
						t.Errorf("got %q, want %q", b.Bytes(), want)
					}
					b.Release()
				}
				got <- err
			}()
			for p.Health().Waiting == 0 && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			eng.Close() // the raw consumer dies: its claim ends, not taken
			if err := <-got; err != nil {
				t.Fatalf("the waiting get: %v", err)
			}
		})
	}
}

package pages

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// engineStrays are the strays a test sends at an engine's listener: idle,
// closing at once, random bytes, and the start of a handshake header
// dribbled a byte at a time.
var engineStrays = []testutil.Stray{
	testutil.StrayIdle,
	testutil.StrayClose,
	testutil.StrayGarbage,
	{Name: "trickle", Send: []byte("XFER\x01\x00\x00"), Trickle: true},
}

// refusals returns the server's refusals on the peer plane by reason.
func refusals(s *Server) map[string]uint64 {
	out := map[string]uint64{}
	for _, f := range s.Engine().Status().AuthFailures {
		if f.Plane == xfer.PlanePeer {
			out[f.Reason] = f.Count
		}
	}
	return out
}

// TestServerAmongStrays: strays of every kind connect to a pages server
// before its client, while the client connects, and after; the server
// drops and counts each and serves the client, over each transport.
func TestServerAmongStrays(t *testing.T) {
	for _, policy := range policies(t) {
		t.Run(string(policy), func(t *testing.T) {
			cfg := engineConfig(t, policy)
			cfg.Listen = "127.0.0.1:0"
			cfg.HandshakeTimeout = 300 * time.Millisecond
			cfg.Security.MaxPendingHandshakes, cfg.Security.MaxPendingPerSource = 16, 8
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := NewServer(ctx, ServerConfig{Engine: cfg, Size: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			stamp(s.Memory(), s.PageSize(), 7)
			stop := make(chan struct{})
			var once sync.Once
			end := func() { once.Do(func() { close(stop) }) }
			defer end()
			// Before: one of each kind; the idle and trickling ones time
			// out.
			var wg sync.WaitGroup
			for _, k := range engineStrays {
				if !testutil.DialStray(s.Addr(), k, stop, &wg) {
					t.Fatalf("a stray (%s) could not connect", k.Name)
				}
			}
			for deadline := time.Now().Add(20 * time.Second); refusals(s)[xfer.ReasonTimeout] < 2; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("refusals %v: want the idle and trickling strays timed out", refusals(s))
				}
			}
			// During: a flood while the client connects and fetches.
			during := testutil.Flood(s.Addr(), engineStrays, 200, 8, stop)
			c := newClient(t, policy)
			if err := c.AddNode(ctx, s.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			bufs, err := c.Alloc(1)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Free(bufs)
			page := bufs[0].Bytes()
			fetch := func(i int) {
				t.Helper()
				gpa := uint64(i * s.PageSize())
				if err := c.FetchPage(ctx, gpa, page); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(page, s.Memory()[gpa:gpa+uint64(s.PageSize())]) {
					t.Fatalf("page %d differs", i)
				}
			}
			fetch(0)
			// After: more strays; the client's connection is untouched.
			after := testutil.Flood(s.Addr(), engineStrays, 40, 4, stop)
			fetch(1)
			after()
			fetch(2)
			end()
			wg.Wait()
			during()
			if peers := c.Engine().Peers(); len(peers) != 1 || peers[0].Transport() != string(policy) {
				t.Fatalf("the client's peers: %v", peers)
			}
			got := refusals(s)
			if got[xfer.ReasonMalformed] == 0 || got[xfer.ReasonNoProof] == 0 || got[xfer.ReasonEvicted] == 0 {
				t.Errorf("refusals %v: want malformed (garbage), no_proof (closed) and evicted (the flood)", got)
			}
		})
	}
}

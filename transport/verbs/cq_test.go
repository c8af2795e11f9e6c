package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// A device's endpoints share its completion queue: a server with four peers
// has one CQ, not one per peer, and every peer's data is right.
func TestOneCQPerDevice(t *testing.T) {
	for _, mode := range []bool{true, false} {
		t.Run(fmt.Sprint("event_channel=", mode), func(t *testing.T) {
			dev := testutil.RequireVerbs(t)
			before := ibv.Live().CQs
			cfg := xfer.Config{RDMA: verbs.Config{Device: dev, UseEventChannel: mode}}
			p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const clients = 3 // besides the pair's
			peers := []*xfer.Peer{p.Peer}
			engs := []*xfer.Engine{p.Client}
			for range clients {
				c := cfg
				c.Transport, c.MemoryMB = xfer.PolicyRDMA, 16
				e, err := xfer.Open(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				peer, err := e.Dial(ctx, p.Server.Addr())
				if err != nil {
					t.Fatal(err)
				}
				peers = append(peers, peer)
				engs = append(engs, e)
			}
			// One CQ per engine: the server's four peers share one.
			if got := ibv.Live().CQs - before; got != 1+len(peers) {
				t.Fatalf("%d CQs for a server with %d peers and %d clients, want %d", got, len(peers), len(peers), 1+len(peers))
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(peers))
			for i, peer := range peers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- churnTraffic(ctx, engs[i], peer, i, p.Target)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// churnTraffic writes a pattern into peer i's quarter of target and reads
// it back, 50 times.
func churnTraffic(ctx context.Context, e *xfer.Engine, peer *xfer.Peer, i int, target *xfer.Region) error {
	desc, ok := peer.Region("target")
	if !ok {
		return errors.New("no target")
	}
	buf, err := e.Alloc(8192)
	if err != nil {
		return err
	}
	defer e.Free(buf)
	back, err := e.Alloc(8192)
	if err != nil {
		return err
	}
	defer e.Free(back)
	off := uint64(i) * (1 << 20)
	for round := range 50 {
		for j := range buf.Bytes() {
			buf.Bytes()[j] = byte(i*31 + round + j)
		}
		if err := peer.Write(ctx, buf.Bytes(), desc.At(off)); err != nil {
			return fmt.Errorf("peer %d round %d: write: %w", i, round, err)
		}
		if err := peer.Read(ctx, back.Bytes(), desc.At(off)); err != nil {
			return fmt.Errorf("peer %d round %d: read: %w", i, round, err)
		}
		if !bytes.Equal(back.Bytes(), buf.Bytes()) {
			return fmt.Errorf("peer %d round %d: read back other bytes", i, round)
		}
		if !bytes.Equal(target.Bytes()[off:off+8192], buf.Bytes()) {
			return fmt.Errorf("peer %d round %d: the server's memory differs", i, round)
		}
	}
	return nil
}

// Peers come and go (their QPs destroyed with work outstanding, their QP
// numbers and CQ references reused) while another peer on the same CQ keeps
// transferring: it never sees an error or wrong data, and no completion of
// a gone peer reaches a new one.
func TestCQChurn(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	cfg := xfer.Config{RDMA: verbs.Config{Device: dev}}
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	steady := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				steady <- nil
				return
			default:
			}
			if err := churnTraffic(ctx, p.Client, p.Peer, 0, p.Target); err != nil {
				steady <- err
				return
			}
		}
	}()
	for round := range 8 {
		c := cfg
		c.Transport, c.MemoryMB = xfer.PolicyRDMA, 16
		e, err := xfer.Open(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		peer, err := e.Dial(ctx, p.Server.Addr())
		if err != nil {
			e.Close()
			t.Fatal(err)
		}
		if err := churnTraffic(ctx, e, peer, 1+round%3, p.Target); err != nil {
			e.Close()
			t.Fatal(err)
		}
		// Leave with writes in flight.
		desc, _ := peer.Region("target")
		buf, _ := e.Alloc(1 << 20)
		for range 4 {
			go peer.Write(ctx, buf.Bytes(), desc.At(3<<20))
		}
		e.Close()
	}
	close(stop)
	if err := <-steady; err != nil {
		t.Fatal(err)
	}
}

// A peer whose queues do not fit in a CQ of the device is refused with an
// error that says so; when the device has as many CQs as it may and none has
// room, the next peer is refused until one leaves.
func TestCQFull(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	size := verbs.CQSize(dev)
	if size == 0 {
		t.Fatal("no CQ size for", dev)
	}
	// Too large for any CQ.
	srv := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	big := xfer.Config{Transport: xfer.PolicyRDMA, MemoryMB: 16, RDMA: verbs.Config{Device: dev, MaxSendWR: size}}
	e, err := xfer.Open(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_, err = e.Dial(ctx, srv.Server.Addr())
	if err == nil || !strings.Contains(err.Error(), "completion queue") {
		t.Fatalf("dial with queues larger than a CQ: %v, want a refusal naming the completion queue", err)
	}
	t.Logf("refused: %v", err)

	// One CQ per device, with room for one peer: the client's second peer
	// is refused until its first leaves.
	defer verbs.SetMaxCQs(verbs.SetMaxCQs(1))
	wr := size / 4 // two QPs of wr send requests (and their receives): more than half the CQ
	cfg := xfer.Config{RDMA: verbs.Config{Device: dev, MaxSendWR: wr}}
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
	c := cfg
	c.Transport, c.MemoryMB, c.Listen = xfer.PolicyRDMA, 16, "127.0.0.1:0"
	s2, err := xfer.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	target, err := s2.NewRegion(4<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	s2.Export("target", target)
	_, err = p.Client.Dial(ctx, s2.Addr())
	if err == nil || !strings.Contains(err.Error(), "completion queues") {
		t.Fatalf("second peer on a full device: %v, want a refusal naming its completion queues", err)
	}
	t.Logf("refused: %v", err)
	if err := churnTraffic(ctx, p.Client, p.Peer, 0, p.Target); err != nil {
		t.Fatalf("the first peer after the refusal: %v", err)
	}
	p.Peer.Close() // its room is free again
	deadline := time.Now().Add(10 * time.Second)
	for {
		peer, err := p.Client.Dial(ctx, s2.Addr())
		if err == nil {
			if err := churnTraffic(ctx, p.Client, peer, 0, target); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after the first peer left: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A busy poller (the default) spins while operations are posted, even when
// their callers poll the completions themselves, and sleeps on the
// completion channel once the peer is idle for rdma_poll_idle; the next
// operation wakes it.
func TestBusyPollerSleepsWhenIdle(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	cfg := xfer.Config{RDMA: verbs.Config{Device: dev, PollIdle: 50 * time.Millisecond}}
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc, ok := p.Peer.Region("target")
	if !ok {
		t.Fatal("no target region")
	}
	buf, err := p.Client.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	write := func(i int) {
		t.Helper()
		buf.Bytes()[0] = byte(i)
		if err := p.Peer.Write(ctx, buf.Bytes()[:8], desc.At(0)); err != nil {
			t.Fatal(err)
		}
		if got := p.Target.Bytes()[0]; got != byte(i) {
			t.Fatalf("write %d: target holds %d", i, got)
		}
	}
	write(0)
	// A stream of operations: no poller sleeps while it runs (each takes
	// far less than the idle time, even under emulation), save a few that
	// a slow vCPU may cause.
	before := verbs.PollerSleeps()
	const ops = 300
	for i := range ops {
		write(i)
	}
	if n := verbs.PollerSleeps() - before; n > ops/10 {
		t.Errorf("the pollers slept %d times during %d back-to-back writes: busy polling should keep them awake", n, ops)
	}
	// Idle: both engines' pollers go to sleep (the target's may already
	// be asleep: one-sided writes post nothing on its side).
	for deadline := time.Now().Add(10 * time.Second); verbs.PollersAsleep() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("%d pollers asleep after 10s of idle, want both engines'", verbs.PollersAsleep())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The next operation wakes them and completes.
	write(7)
	t.Logf("%d poller sleeps in all", verbs.PollerSleeps())
	if n := verbs.PollersAsleep(); n > 1 {
		t.Logf("%d pollers still asleep after the write (the target's needs no wake-up)", n)
	}
}

// A device whose completion queues are all full refuses a peer with an
// error matching transport.ErrNoRoom, which makes the engine connect the
// peer over the next transport (TestFullDeviceFallsBack in the root
// package), naming the device, its CQs and what the peer needs; Usable's
// check says the same before any endpoint is made, and finds room when
// one CQ has it. No device is opened: it runs without RDMA hardware.
func TestFullDeviceIsNoRoom(t *testing.T) {
	room, join := verbs.CQRoom("mlx5_0", 4096, 4000, 784)
	for what, err := range map[string]error{"cqRoom": room, "joinCQ": join} {
		if !errors.Is(err, transport.ErrNoRoom) || errors.Is(err, transport.ErrTooLarge) ||
			!strings.Contains(err.Error(), "mlx5_0's 16 completion queues of") || !strings.Contains(err.Error(), "a peer needs 784") {
			t.Errorf("%s on a full device: %v, want ErrNoRoom naming the device's CQs and the need", what, err)
		}
	}
	if room, _ := verbs.CQRoom("mlx5_0", 4096, 3000, 784); room != nil {
		t.Errorf("cqRoom with room on every CQ: %v", room)
	}
}

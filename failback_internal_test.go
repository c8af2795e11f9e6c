package xfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/internal/metrics"
	"github.com/xferio/xfer/transport"
)

// A dialed peer whose shm connection breaks while shm cannot be brought
// up again goes on over tcp, pauses shm and probes it with backoff; once
// shm can be brought up, the same peer is back on it, the tcp connection
// is closed after its operations ended, and every byte written and read
// back throughout is checked.
//
// What the test stands in for: a removed rdma device, whose transport then
// reports itself unavailable (rdma's Available fails) until the device is
// back. Nothing takes shm away from a process for real, so the engine's
// test hook refuses it on the dialing side for as long as down is set; the
// connection itself is broken for real, by the other engine closing it.
// On rdma, TestBenchDeviceRemoved in cmd/xfer does the same with a device
// deleted and added again, in the RDMA VM.
func TestFailbackToPausedTransport(t *testing.T) {
	ctx := context.Background()
	srv, err := Open(ctx, Config{Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	reg := prometheus.NewRegistry()
	cli, err := Open(ctx, Config{MemoryMB: 8, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var down atomic.Bool
	// rdma (in the RDMA VM) is left out: the test is about shm and tcp.
	cli.fb = failbackOpts{first: 50 * time.Millisecond, max: 200 * time.Millisecond, refuse: func(name string) error {
		if name == "rdma" || name == "shm" && down.Load() {
			return fmt.Errorf("%w: taken away by the test", transport.ErrNotSupported)
		}
		return nil
	}}
	region, err := srv.NewRegion(1<<20, AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if p.Transport() != "shm" {
		t.Skipf("the peer is on %q, not shm: this host cannot take the test", p.Transport())
	}

	// Traffic throughout: WRITE a pattern, READ it back, compare, and
	// note the transports the operations ran on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[string]int{}
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			src, err := cli.Alloc(64 << 10)
			if err != nil {
				errs <- err
				return
			}
			dst, err := cli.Alloc(64 << 10)
			if err != nil {
				errs <- err
				return
			}
			at := region.Desc().At(uint64(w) * 64 << 10)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s, d := src.Bytes(), dst.Bytes()
				for j := range s {
					s[j] = byte(i*7 + j + w)
				}
				if err := p.Write(ctx, s, at); err != nil {
					errs <- fmt.Errorf("write %d: %w", i, err)
					return
				}
				if err := p.Read(ctx, d, at); err != nil {
					errs <- fmt.Errorf("read %d: %w", i, err)
					return
				}
				if !bytes.Equal(s, d) {
					errs <- fmt.Errorf("transfer %d read back other bytes than it wrote", i)
					return
				}
				mu.Lock()
				ran[p.Transport()]++
				mu.Unlock()
			}
		})
	}
	failed := func() error {
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !ok() {
			if err := failed(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20 s; status %+v; the server's peers %+v", what, cli.Status().Peers, srv.Status().Peers)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ranOn := func(tr string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return ran[tr] > 20 }
	}
	waitFor("traffic on shm", ranOn("shm"))

	// Engine.WaitNotify hears of the lost shm connection once, and not of
	// the tcp one the move back retires.
	wnCtx, wnCancel := context.WithCancel(ctx)
	var lostMu sync.Mutex
	var losses []error
	wnDone := make(chan struct{})
	go func() {
		defer close(wnDone)
		for {
			_, err := cli.WaitNotify(wnCtx)
			if wnCtx.Err() != nil {
				return
			}
			if err != nil {
				lostMu.Lock()
				losses = append(losses, err)
				lostMu.Unlock()
			}
		}
	}()

	// shm goes: the connection breaks (the server closes its side) and
	// shm cannot be set up again.
	down.Store(true)
	for _, ap := range srv.Peers() {
		ap.Close()
	}
	waitFor("the peer on tcp", func() bool { return p.Transport() == "tcp" })
	waitFor("traffic on tcp", ranOn("tcp"))
	// The server's peer of the tcp connection: the move back resumes it.
	var tcpPeer *Peer
	waitFor("the server's tcp peer", func() bool {
		for _, sp := range srv.Peers() {
			if sp.Transport() == "tcp" {
				tcpPeer = sp
			}
		}
		return tcpPeer != nil
	})
	// A server-side Recv that waits through the move back is not ended
	// by it: it gets the message sent after.
	type recvd struct {
		msg []byte
		err error
	}
	recvCh := make(chan recvd, 1)
	go func() {
		buf := make([]byte, 64)
		n, err := tcpPeer.Recv(ctx, buf)
		recvCh <- recvd{buf[:n], err}
	}()
	waitFor("two failed probes of shm", func() bool {
		ps := cli.Status().Peers
		return len(ps) == 1 && len(ps[0].Paused) == 1 && ps[0].Paused[0].Probes >= 2
	})
	ps := cli.Status().Peers[0]
	if pt := ps.Paused[0]; pt.Transport != "shm" || pt.Reason == "" || pt.NextProbe.IsZero() || pt.LastError == "" {
		t.Errorf("the paused transport in the status: %+v", pt)
	}

	// shm comes back: the same peer moves back to it.
	down.Store(false)
	mu.Lock()
	ran["shm"] = 0
	mu.Unlock()
	waitFor("the same peer back on shm", func() bool { return p.Transport() == "shm" })
	waitFor("traffic on shm again", ranOn("shm"))
	// The tcp connection is closed once its operations ended: the server
	// is left with the shm peer alone.
	waitFor("the tcp connection closed", func() bool {
		sp := srv.Peers()
		return len(sp) == 1 && sp[0].Transport() == "shm"
	})
	// The server kept its peer: the probe resumed it (wire.CapResume),
	// and Accept did not return it again.
	if sp := srv.Peers(); sp[0] != tcpPeer {
		t.Errorf("the server's peer after the move back is a new one, not the one of the tcp connection")
	}
	if n := len(srv.accepted); n != 2 {
		t.Errorf("Accept has %d peers queued, want 2 (the first connection's and the tcp one's)", n)
	}
	// The client closed the tcp connection once drained; the server
	// sees it end a moment later.
	waitFor("the client closed the tcp connection", func() bool { return p.draining.Load() == nil })
	time.Sleep(100 * time.Millisecond)
	select {
	case r := <-recvCh:
		t.Fatalf("the server's Recv ended during the move back: %q, %v", r.msg, r.err)
	default:
	}
	msg, err := cli.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	copy(msg.Bytes(), "after the move")
	if err := p.Send(ctx, msg.Bytes()[:14]); err != nil {
		t.Fatalf("send after the move back: %v", err)
	}
	select {
	case r := <-recvCh:
		if r.err != nil || string(r.msg) != "after the move" {
			t.Fatalf("the server's Recv across the move back: %q, %v", r.msg, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server's Recv did not get the message sent after the move back")
	}
	close(stop)
	wg.Wait()
	if err := failed(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a late report of the retired connection would come by now
	wnCancel()
	<-wnDone
	lostMu.Lock()
	if len(losses) != 1 || !errors.Is(losses[0], ErrPeerLost) {
		t.Errorf("Engine.WaitNotify reported %v, want the shm connection's loss alone", losses)
	}
	lostMu.Unlock()

	if got, _ := cli.Dial(ctx, srv.Addr()); got != p {
		t.Error("Dial returns another peer than the one that moved back")
	}
	ps = cli.Status().Peers[0]
	if len(ps.Paused) != 0 || ps.Transport != "shm" {
		t.Errorf("after the move back the status says %+v", ps)
	}
	if got := gathered(t, reg, "xfer_failovers_total", "from", "tcp", "to", "shm", "reason", metrics.ReasonRecovered); got != 1 {
		t.Errorf("xfer_failovers_total{from=tcp,to=shm,reason=recovered} = %v, want 1", got)
	}
	// The move itself failed nothing: operations posted on tcp ended there.
	if got := gathered(t, reg, "xfer_failovers_total", "from", "tcp", "to", "shm", "reason", metrics.ReasonConnLost); got != 0 {
		t.Errorf("xfer_failovers_total{from=tcp,to=shm,reason=connection_lost} = %v: the move back cut operations off", got)
	}
	var back *FailoverEvent
	for _, ev := range cli.Status().RecentFailovers {
		if ev.Reason == metrics.ReasonRecovered {
			back = &ev
		}
	}
	if back == nil || back.From != "tcp" || back.To != "shm" || back.Attempts < 3 {
		t.Errorf("the status's recovered failover: %+v in %+v", back, cli.Status().RecentFailovers)
	}
}

// A probe that cannot connect fails and backs off, doubling up to the
// cap; the peer's connection is untouched.
func TestPausedTransportBacksOff(t *testing.T) {
	ctx := context.Background()
	srv, cli := failbackPair(t)
	cli.fb = failbackOpts{first: 20 * time.Millisecond, max: 80 * time.Millisecond, refuse: func(name string) error {
		if name == "shm" || name == "rdma" {
			return errors.New("gone")
		}
		return nil
	}}
	p, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if p.Transport() != "tcp" {
		t.Fatalf("on %q with shm refused", p.Transport())
	}
	ep := p.current()
	p.pause("shm", "tcp", "the test paused it")
	deadline := time.Now().Add(10 * time.Second)
	for {
		pt, _ := p.fb.Paused()
		if pt.Probes >= 4 {
			if pt.Wait != 80*time.Millisecond || pt.LastErr == "" {
				t.Errorf("after %d probes: wait %v (want the cap, 80ms), last error %q", pt.Probes, pt.Wait, pt.LastErr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d probes after 10 s", pt.Probes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.current() != ep || p.Transport() != "tcp" {
		t.Error("failed probes changed the peer's connection")
	}
}

// failbackPair opens a listening engine and one to dial it, closed with
// the test.
func failbackPair(t *testing.T) (srv, cli *Engine) {
	t.Helper()
	srv, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err = Open(context.Background(), Config{MemoryMB: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return srv, cli
}

package rails_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

// run runs a command of the VM's tools, failing the test with its output.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// waitActive waits until dev's port 1 is ACTIVE.
func waitActive(t *testing.T, dev string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		b, _ := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "ports/1/state"))
		if strings.Contains(string(b), "ACTIVE") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: port 1 not ACTIVE 20s after it was added (%q)", dev, strings.TrimSpace(string(b)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sentPackets is dev's own count of the packets it sent (rxe's hw
// counters), or ok false where the device keeps none (siw).
func sentPackets(dev string) (n uint64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "ports/1/hw_counters/sent_pkts"))
	if err != nil {
		return 0, false
	}
	n, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// railStatus returns the rails the engine's status shows for rdma.
func railStatus(e *xfer.Engine) []xfer.RailStatus {
	for _, ts := range e.Status().Transports {
		if ts.Name == "rdma" {
			return ts.Rails
		}
	}
	return nil
}

// Two engines over two rails: the device of the VM and a second one on a
// dummy netdev. Traffic spreads over both (each device's own packet
// counter grows); the second rail's device is deleted under a READ and
// WRITE load, and no operation fails and every byte read back is the one
// written; the rail shows down in the status, with the operations it had
// in flight counted. The device is added again, the status shows the rail
// up once more, the same connection takes the rail back (operations are
// cut over both rails again, and each rail's count of operations grows,
// every byte read back the one written), and a new pair of engines uses
// it too.
func TestRailFailover(t *testing.T) {
	dev := testutil.RequireDevice(t)
	typ, second := dummyNetdev(t, dev, "xfrail1", "10.0.9.1/24", "9")
	add := func() {
		run(t, "rdma", "link", "add", second, "type", typ, "netdev", "xfrail1")
		waitActive(t, second)
	}
	add()
	// After the engines' cleanups (they run first, in reverse order).
	t.Cleanup(func() { exec.Command("rdma", "link", "delete", second).Run() })

	const slice = 256 << 10
	cfg := xfer.Config{RDMA: verbs.Config{Devices: []string{dev, second}, SliceSize: slice}}
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
	desc, ok := p.Peer.Region("target")
	if !ok {
		t.Fatal("no target region")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Workers 0 and 1 move 512 KiB (cut over both rails), the others
	// 64 KiB (each on the less loaded rail). Even workers write a pattern
	// of the round into their slot and read it back; odd ones read a slot
	// the target holds a fixed pattern in.
	sizes := []int{512 << 10, 512 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10}
	offs := []int{0, 512 << 10, 1 << 20, 1<<20 + 64<<10, 1<<20 + 128<<10, 1<<20 + 192<<10}
	pattern := func(i, round int, b []byte) {
		for j := range b {
			b[j] = byte(j*(i+3) + i + round*7)
		}
	}
	var done atomic.Int64
	var stop atomic.Bool
	last := make([]atomic.Int64, len(sizes)) // each writer's last round
	errs := make(chan error, len(sizes))
	var wg sync.WaitGroup
	for i, n := range sizes {
		buf, err := p.Client.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		back, err := p.Client.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, n)
		if i%2 == 1 {
			pattern(i, 0, want)
			copy(p.Target.Bytes()[offs[i]:], want)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := desc.At(uint64(offs[i]))
			for round := 1; !stop.Load(); round++ {
				var err error
				if i%2 == 0 {
					pattern(i, round, want)
					copy(buf.Bytes(), want)
					if err = p.Peer.Write(ctx, buf.Bytes(), dst); err == nil {
						clear(back.Bytes())
						err = p.Peer.Read(ctx, back.Bytes(), dst)
					}
				} else {
					clear(back.Bytes())
					err = p.Peer.Read(ctx, back.Bytes(), dst)
				}
				if err == nil && !bytes.Equal(back.Bytes(), want) {
					err = fmt.Errorf("worker %d round %d: read back other bytes than were written", i, round)
				}
				if err != nil {
					errs <- err
					return
				}
				last[i].Store(int64(round))
				done.Add(1)
			}
		}()
	}
	wait := func(n int64) {
		t.Helper()
		for target := done.Load() + n; done.Load() < target; {
			select {
			case err := <-errs:
				t.Fatalf("after %d operations: %v", done.Load(), err)
			case <-ctx.Done():
				t.Fatalf("%d operations done, waiting for %d", done.Load(), target)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}

	// Both rails carry traffic.
	s0, c0 := sentPackets(dev)
	s1, c1 := sentPackets(second)
	wait(60)
	if c0 && c1 {
		e0, _ := sentPackets(dev)
		e1, _ := sentPackets(second)
		t.Logf("packets sent while both rails were up: %s %d, %s %d", dev, e0-s0, second, e1-s1)
		if e0-s0 == 0 || e1-s1 == 0 {
			t.Fatalf("traffic did not spread over both rails: %s sent %d packets, %s %d", dev, e0-s0, second, e1-s1)
		}
	} else {
		t.Logf("%s keeps no packet counters: the spread is not checked by them", typ)
	}
	rs := railStatus(p.Client)
	t.Logf("rails while both are up: %+v", rs)
	if len(rs) != 2 || !rs[0].Up || !rs[1].Up || rs[0].Ops == 0 || rs[1].Ops == 0 {
		t.Fatalf("status with both rails up: %+v; want both up, both with operations done", rs)
	}

	// Delete the second rail's device under the load.
	start := time.Now()
	deleted := make(chan error, 1)
	go func() {
		out, err := exec.Command("rdma", "link", "delete", second).CombinedOutput()
		if err != nil {
			err = errors.New(err.Error() + ": " + strings.TrimSpace(string(out)))
		}
		deleted <- err
	}()
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatalf("rdma link delete %s: %v", second, err)
		}
		t.Logf("rdma link delete %s returned after %v, %d operations done", second, time.Since(start).Round(time.Millisecond), done.Load())
	case err := <-errs:
		t.Fatalf("while %s was deleted, an operation failed: %v", second, err)
	case <-time.After(time.Minute):
		t.Fatalf("rdma link delete %s still waits a minute later: something holds the device", second)
	}
	wait(60) // on the one rail left
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("an operation failed: %v", err)
	}
	if p.Peer.Transport() != "rdma" {
		t.Errorf("the peer moved to %q", p.Peer.Transport())
	}
	st := p.Client.Status()
	if st.Failovers != 0 {
		t.Errorf("the engine repeated %d operations on a new connection: the rail's were to be repeated on the other rail, in the same one (%+v)", st.Failovers, st.RecentFailovers)
	}
	rs = railStatus(p.Client)
	t.Logf("rails after the delete: %+v", rs)
	if len(rs) != 2 || !rs[0].Up || rs[1].Up || rs[1].Down == 0 {
		t.Errorf("status after %s was deleted: %+v; want it down, counted", second, rs)
	}
	for i := 0; i < len(sizes); i += 2 {
		want := make([]byte, sizes[i])
		pattern(i, int(last[i].Load()), want)
		if !bytes.Equal(p.Target.Bytes()[offs[i]:offs[i]+sizes[i]], want) {
			t.Errorf("worker %d's slot does not hold its last round's bytes", i)
		}
	}

	// The device comes back: the status shows the rail up again (the
	// transport probes it), and new connections use it.
	add()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if rs := railStatus(p.Client); len(rs) == 2 && rs[1].Up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s added again, but the status shows %+v 30s later", second, railStatus(p.Client))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The same connection takes the rail back: its dialer asks for it
	// with backoff (1 s, doubling up to 30 s), so within a minute.
	before := railStatus(p.Client)
	src1, _ := p.Client.Alloc(1 << 20)
	back1, _ := p.Client.Alloc(1 << 20)
	s1, _ = sentPackets(second)
	for round, deadline := 0, time.Now().Add(time.Minute); ; round++ {
		for i := range src1.Bytes() {
			src1.Bytes()[i] = byte(i*7 + round)
		}
		clear(back1.Bytes())
		if err := p.Peer.Write(ctx, src1.Bytes(), desc.At(0)); err != nil {
			t.Fatalf("write while %s comes back: %v", second, err)
		}
		if err := p.Peer.Read(ctx, back1.Bytes(), desc.At(0)); err != nil {
			t.Fatalf("read while %s comes back: %v", second, err)
		}
		if !bytes.Equal(back1.Bytes(), src1.Bytes()) {
			t.Fatalf("round %d while %s comes back: read back other bytes than were written", round, second)
		}
		rs := railStatus(p.Client)
		if len(rs) == 2 && rs[0].Ops > before[0].Ops && rs[1].Ops > before[1].Ops {
			t.Logf("the connection took %s back after %d rounds: rails %+v", second, round+1, rs)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is back, but a minute later the connection's operations still do not use it: rails %+v, before %+v", second, rs, before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if e1, ok := sentPackets(second); ok && e1 == s1 {
		t.Errorf("the connection took %s back but sent no packet on it", second)
	}
	if st := p.Client.Status(); st.Failovers != 0 || p.Peer.Transport() != "rdma" {
		t.Errorf("after %s came back: %d failovers to a new connection, transport %q; want the same rdma connection", second, st.Failovers, p.Peer.Transport())
	}

	p2 := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyRDMA, Config: cfg}, "")
	d2, _ := p2.Peer.Region("target")
	src, _ := p2.Client.Alloc(1 << 20)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*13 + 5)
	}
	s1, _ = sentPackets(second)
	for range 8 {
		if err := p2.Peer.Write(ctx, src.Bytes(), d2.At(0)); err != nil {
			t.Fatalf("write with %s back: %v", second, err)
		}
	}
	if !bytes.Equal(p2.Target.Bytes()[:1<<20], src.Bytes()) {
		t.Fatalf("the write with %s back did not land", second)
	}
	if e1, ok := sentPackets(second); ok && e1 == s1 {
		t.Errorf("%s is back but a new pair's writes sent no packet on it", second)
	}
}

// Two engines that list their two devices in opposite orders: rail 0 is
// paired by reachability (each side's device on the same network, not
// each side's first device), the other rail with it, and operations cut
// over both rails land, every byte read back the one written. On one host
// a cross pairing would work too: this checks that the pairing's
// connection holds up where rail 0 is not each side's first device; which
// pair is taken is TestRailZero's (transport/verbs).
func TestRailZeroOrder(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if dev == "" {
		testutil.SkipOrFail(t, "no RDMA device")
	}
	typ, second := dummyNetdev(t, dev, "xfrail2", "10.0.8.1/24", "8")
	run(t, "rdma", "link", "add", second, "type", typ, "netdev", "xfrail2")
	waitActive(t, second)
	t.Cleanup(func() { exec.Command("rdma", "link", "delete", second).Run() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(devs ...string) *xfer.Engine {
		e, err := xfer.Open(ctx, xfer.Config{Transport: xfer.PolicyRDMA, Listen: "127.0.0.1:0", MemoryMB: 16,
			RDMA: verbs.Config{Devices: devs, SliceSize: 256 << 10}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	srv := open(second, dev)
	target, err := srv.NewRegion(1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("target", target)
	cli := open(dev, second)
	p, err := cli.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	src, _ := cli.Alloc(1 << 20)
	back, _ := cli.Alloc(1 << 20)
	for round := range 16 {
		for i := range src.Bytes() {
			src.Bytes()[i] = byte(i*5 + round)
		}
		clear(back.Bytes())
		if err := p.Write(ctx, src.Bytes(), target.Desc().At(0)); err != nil {
			t.Fatal(err)
		}
		if err := p.Read(ctx, back.Bytes(), target.Desc().At(0)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Bytes(), src.Bytes()) || !bytes.Equal(target.Bytes(), src.Bytes()) {
			t.Fatalf("round %d: other bytes than were written", round)
		}
	}
	msg, _ := cli.Alloc(64)
	copy(msg.Bytes(), "on rail 0")
	if err := p.Send(ctx, msg.Bytes()[:9]); err != nil {
		t.Fatal(err)
	}
	rs := railStatus(cli)
	t.Logf("rails: %+v", rs)
	if len(rs) != 2 || rs[0].Ops == 0 || rs[1].Ops == 0 {
		t.Fatalf("status %+v; want both rails with operations done", rs)
	}
}

// dummyNetdev adds a dummy netdev named netdev with address cidr (removed
// with the test), for a second software device of dev's type, and returns
// that type and the second device's name (the type and suffix). It skips
// (or fails, where verbs are required) without iproute2 or when dev is
// not rxe or siw.
func dummyNetdev(t *testing.T, dev, netdev, cidr, suffix string) (typ, second string) {
	t.Helper()
	for _, tool := range []string{"rdma", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "the "+tool+" tool (iproute2) is needed to add a second device: "+err.Error())
		}
	}
	typ = dev[:3]
	if typ != "rxe" && typ != "siw" {
		testutil.SkipOrFail(t, dev+" is not rxe or siw: the test adds a second software device of its type")
	}
	run(t, "ip", "link", "add", netdev, "type", "dummy")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", netdev).Run() })
	run(t, "ip", "addr", "add", cidr, "dev", netdev)
	run(t, "ip", "link", "set", netdev, "up")
	return typ, typ + suffix
}

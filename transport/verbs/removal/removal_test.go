package removal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/ibv"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport/verbs"
	"github.com/xferio/xfer/xfertest"
)

func rdmaCmd(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "rdma", args...).CombinedOutput()
}

// The RDMA device is deleted (`rdma link delete`) while two engines under
// the auto policy move data over it: the READs and WRITEs in flight do not
// hang, nor fail: the connection carries on over its control connection
// (tcp), without a new handshake, and they are repeated there (a failover
// inside the connection); every byte written and read is the right one.
// Both sides keep their peer: the server accepts no new one. The engines
// let go of the device so that the kernel's removal finishes, and the same
// *Peer carries on over tcp, the failover counted and logged at Warn. The
// device is added again afterwards, and the engine uses it again for a new
// peer.
func TestDeviceRemoved(t *testing.T) {
	dev := testutil.RequireDevice(t)
	if _, err := exec.LookPath("rdma"); err != nil {
		testutil.SkipOrFail(t, "the rdma tool (iproute2) is needed to delete the device: "+err.Error())
	}
	typ, netdev := testutil.SoftLink(t, dev)

	// The client's log, at the default level (warn): the fallback must
	// show there, once.
	var logBuf syncBuffer
	p := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyAuto, Config: xfer.Config{RDMA: verbs.Config{Device: dev},
		Logger: slog.New(slog.NewTextHandler(&logBuf, nil))}}, "")
	if got := p.Peer.Transport(); got != "rdma" {
		// Say why: the transports as each engine sees them now, the
		// fallbacks each recorded, and the client's log.
		cs, ss := p.Client.Status(), p.Server.Status()
		t.Fatalf("auto picked %q with %s available\nclient: transports %+v, fallbacks %+v, auth failures %+v\nserver: transports %+v, fallbacks %+v, auth failures %+v\nthe client's log:\n%s",
			got, dev, cs.Transports, cs.RecentFallbacks, cs.RecentAuthFailures, ss.Transports, ss.RecentFallbacks, ss.RecentAuthFailures, logBuf.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Dial returns once the client's side of the connection is up; the
	// server lists its peer a moment later, when its own side is.
	ap, err := p.Server.Accept(ctx)
	if err != nil {
		t.Fatalf("the server accepted no peer: %v", err)
	}
	accepted := p.Server.Peers()
	if len(accepted) != 1 || accepted[0] != ap {
		t.Fatalf("the server has %d peers, want 1: the one it accepted", len(accepted))
	}
	desc, ok := p.Peer.Region("target")
	if !ok {
		t.Fatal("no target region")
	}

	// Writers and readers keep operations in flight on both QPs: writers
	// write a pattern of their own into their slot, readers read a slot
	// the target holds a pattern in, and check it.
	const chunk = 1 << 20
	pattern := func(i int, b []byte) {
		for j := range b {
			b[j] = byte(j*(i+3) + i)
		}
	}
	var done atomic.Int64
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		buf, err := p.Client.Alloc(chunk)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, chunk)
		pattern(i, want)
		if i%2 == 0 {
			copy(buf.Bytes(), want)
		} else {
			copy(p.Target.Bytes()[i*chunk:(i+1)*chunk], want)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := desc.At(uint64(i) * chunk)
			for {
				var err error
				if i%2 == 0 {
					err = p.Peer.Write(ctx, buf.Bytes(), dst)
				} else {
					clear(buf.Bytes())
					err = p.Peer.Read(ctx, buf.Bytes(), dst)
					if err == nil && !bytes.Equal(buf.Bytes(), want) {
						err = fmt.Errorf("worker %d: a READ returned other bytes than the target holds", i)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				done.Add(1)
				// An operation that began after the rdma endpoint failed
				// redials and succeeds over the fallback: that worker is
				// done too, without an error.
				if tr := p.Peer.Transport(); tr != "rdma" && tr != "" {
					errs <- nil
					return
				}
			}
		}()
	}
	for done.Load() < 8 {
		time.Sleep(10 * time.Millisecond)
	}

	deleted := make(chan error, 1)
	start := time.Now()
	go func() {
		out, err := rdmaCmd(context.Background(), "link", "delete", dev)
		if err != nil {
			err = errors.New(err.Error() + ": " + strings.TrimSpace(string(out)))
		}
		deleted <- err
	}()
	readd := func() {
		if out, err := rdmaCmd(context.Background(), "link", "add", dev, "type", typ, "netdev", netdev); err != nil {
			t.Errorf("rdma link add %s type %s netdev %s: %v: %s", dev, typ, netdev, err, out)
		}
	}

	// No operation fails: those in flight are repeated over the fallback,
	// and those after it run there.
	for range 4 {
		select {
		case err := <-errs:
			if err == nil {
				t.Logf("a worker carried on over %s, %v after the delete started", p.Peer.Transport(), time.Since(start).Round(time.Millisecond))
				continue
			}
			t.Errorf("%v after the delete started, an operation failed: %v", time.Since(start).Round(time.Millisecond), err)
		case <-time.After(time.Minute):
			// Where they hang, for the log: this has happened once on siw.
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
			t.Fatalf("operations in flight still hang a minute after rdma link delete %s (%d completed)", dev, done.Load())
		}
	}
	wg.Wait()
	st := p.Client.Status()
	t.Logf("%d operations completed; %d repeated after the removal (failovers): %+v", done.Load(), st.Failovers, st.RecentFailovers)
	moved := false
	for _, f := range st.RecentFailovers {
		if f.From != "rdma" || f.To == "rdma" {
			t.Errorf("failover %+v: want from rdma to another transport", f)
		}
		moved = moved || f.Reason == "path_failed" && f.To == "tcp"
	}
	if !moved {
		t.Errorf("no failover inside the connection (path_failed, rdma to tcp) recorded: %+v", st.RecentFailovers)
	}
	for i := 0; i < 4; i += 2 {
		want := make([]byte, chunk)
		pattern(i, want)
		if !bytes.Equal(p.Target.Bytes()[i*chunk:(i+1)*chunk], want) {
			t.Errorf("worker %d's slot does not hold what it wrote", i)
		}
	}

	// The engines let go of the device, so the kernel's removal finishes.
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatalf("rdma link delete %s: %v", dev, err)
		}
		t.Logf("rdma link delete %s returned after %v", dev, time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Minute):
		// Added again once the removal is done, when this process exits.
		t.Fatalf("rdma link delete %s still waits a minute later: something still holds the device (live verbs objects: %v)", dev, ibv.Live())
	}
	defer func() { readd() }()
	// Both engines closed everything on the device (the kernel's removal
	// could not finish otherwise); the last counters drop just after.
	for deadline := time.Now().Add(5 * time.Second); !ibv.Live().IsZero(); {
		if time.Now().After(deadline) {
			t.Errorf("verbs objects still open after the removal: %v", ibv.Live())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The same peer carries on over another transport.
	src, _ := p.Client.Alloc(chunk)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 3)
	}
	if err := p.Peer.Write(ctx, src.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("write after the removal: %v", err)
	}
	if got := p.Peer.Transport(); got != "tcp" {
		t.Fatalf("after the removal the peer is on %q, want tcp (its control connection)", got)
	}
	// The server's peer is the same one, on the same connection.
	if now := p.Server.Peers(); len(now) != 1 || now[0] != accepted[0] || now[0].Transport() != "tcp" {
		t.Fatalf("the server's peers after the removal: %v (was %v); want the same peer, on tcp", now, accepted)
	}
	if !bytes.Equal(p.Target.Bytes()[:chunk], src.Bytes()) {
		t.Fatal("the write after the removal did not land")
	}
	back, _ := p.Client.Alloc(chunk)
	if err := p.Peer.Read(ctx, back.Bytes(), desc.At(0)); err != nil {
		t.Fatalf("read after the removal: %v", err)
	}
	if !bytes.Equal(back.Bytes(), src.Bytes()) {
		t.Fatal("the read after the removal returned other data")
	}
	t.Logf("the peer carries on over %s; failovers counted: %d", p.Peer.Transport(), p.Client.Status().Failovers)
	if log := logBuf.String(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "carries on over its control connection") {
		t.Errorf("the failover was not logged at warn; the engines' log:\n%s", log)
	}

	// With the device back, the same engine uses it for a new peer.
	readd()
	readd = func() {}
	p2 := xfertest.NewPair(t, xfertest.Options{Policy: xfer.PolicyAuto, Config: xfer.Config{RDMA: verbs.Config{Device: dev}}}, "")
	peer, err := p.Client.Dial(ctx, p2.Server.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got := peer.Transport(); got != "rdma" {
		t.Fatalf("with %s added again, a new peer got %q", dev, got)
	}
	d2, _ := peer.Region("target")
	if err := peer.Write(ctx, src.Bytes(), d2.At(0)); err != nil {
		t.Fatalf("write over the re-added %s: %v", dev, err)
	}
	if !bytes.Equal(p2.Target.Bytes()[:chunk], src.Bytes()) {
		t.Fatalf("the write over the re-added %s did not land", dev)
	}
}

// syncBuffer is a bytes.Buffer that engines' goroutines can log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

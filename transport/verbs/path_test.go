package verbs_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/transporttest"
	"github.com/xferio/xfer/transport/verbs"
)

// completions receives the operations the test posts as they complete.
type completions chan *transport.Op

func (c completions) OpDone(op *transport.Op) { c <- op }

// The path MTU, as the device reports it for each QP (ibv_query_qp), is
// the smaller of what the two sides offer: each side's port's active MTU,
// capped by its rdma.mtu. Both sides capped, one side capped (the peers
// disagree), and neither, with a WRITE and a READ of 64 KiB (many packets
// at any of these MTUs) checked byte for byte over each. An MTU that is
// not one of InfiniBand's is refused with the key named.
func TestPathMTU(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if strings.HasPrefix(dev, "siw") {
		t.Skip("iWARP runs over TCP, whose segments the path MTU does not size")
	}
	probe := verbs.New(verbs.Config{Device: dev}, nil)
	active := verbs.ActiveMTU(probe)
	probe.Close()
	if active < 256 {
		t.Fatalf("%s reports active MTU %d", dev, active)
	}
	bad := verbs.New(verbs.Config{Device: dev, MTU: 1500}, nil)
	err := bad.Available()
	bad.Close()
	if err == nil || !strings.Contains(err.Error(), "mtu 1500") || !strings.Contains(err.Error(), "256, 512, 1024, 2048 or 4096") {
		t.Fatalf("mtu 1500: %v, want a refusal that names the key and the values", err)
	}

	for _, c := range []struct {
		name             string
		dialer, acceptor int // rdma.mtu; 0: the port's
		want             int
	}{
		{"both capped", 256, 256, 256},
		{"peers disagree", 512, 0, min(512, active)},
		{"peers disagree the other way", 0, 256, 256},
		{"uncapped", 0, 0, active},
	} {
		t.Run(c.name, func(t *testing.T) {
			var trs []*verbs.Transport
			for _, m := range []int{c.dialer, c.acceptor} {
				trs = append(trs, verbs.New(verbs.Config{Device: dev, MTU: m}, nil))
			}
			p, err := transporttest.Connect(t, trs[0], trs[1], transporttest.PairConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for i, tr := range trs {
				mtus := verbs.PathMTUs(t, tr)
				if len(mtus) == 0 {
					t.Fatalf("side %d: no QPs", i)
				}
				for _, m := range mtus {
					if m != c.want {
						t.Fatalf("side %d (rdma.mtu %d): a QP has path MTU %d, want %d (active %d; dialer %d, acceptor %d)",
							i, []int{c.dialer, c.acceptor}[i], m, c.want, active, c.dialer, c.acceptor)
					}
				}
			}
			const n = 64 << 10
			local := p.Dialer.Host.NewRegion(n, transport.AccessRead|transport.AccessWrite)
			remote := p.Acceptor.Host.NewRegion(n, transport.AccessRead|transport.AccessWrite)
			transporttest.Fill(local.Bytes(), 7)
			run := func(kind transport.OpKind, buf []byte) {
				t.Helper()
				done := make(completions, 1)
				op := p.Dialer.Host.Op(kind, buf, remote.At(0), 0, done)
				p.Dialer.Endpoint.Post([]*transport.Op{op}, false)
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Fatalf("%s of %d bytes did not complete in a minute", kind, n)
				}
				if op.Err != nil {
					t.Fatalf("%s of %d bytes at path MTU %d: %v", kind, n, c.want, op.Err)
				}
			}
			run(transport.OpWrite, local.Bytes())
			if !bytes.Equal(remote.Bytes(), local.Bytes()) {
				t.Fatalf("the WRITE at path MTU %d left other bytes at the target", c.want)
			}
			transporttest.Fill(remote.Bytes(), 11)
			run(transport.OpRead, local.Bytes())
			if !bytes.Equal(remote.Bytes(), local.Bytes()) {
				t.Fatalf("the READ at path MTU %d brought other bytes", c.want)
			}
		})
	}
}

// A peer whose QP info names another GID than its handshake did (the GID
// allowed_gids checked) is refused before any QP is connected to it.
func TestQPInfoGIDMatchesHandshake(t *testing.T) {
	dev := testutil.RequireVerbs(t)
	if strings.HasPrefix(dev, "siw") {
		t.Skip("iWARP connects through rdma_cm, by IP address")
	}
	verbs.ForgeGID()
	_, err := transporttest.Connect(t, verbs.New(verbs.Config{Device: dev}, nil), verbs.New(verbs.Config{Device: dev}, nil), transporttest.PairConfig{})
	if !errors.Is(err, transport.ErrProtocol) || !strings.Contains(err.Error(), "handshake GID") {
		t.Fatalf("a dialer whose QP info names another GID: %v, want a protocol error naming both GIDs", err)
	}
	// The next connection, honest, works.
	transporttest.NewPair(t, func(testing.TB) transport.Transport { return verbs.New(verbs.Config{Device: dev}, nil) }, transporttest.PairConfig{})
}

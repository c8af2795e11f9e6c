package negotiate

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/xferio/xfer/internal/wire"
	"github.com/xferio/xfer/transport"
)

// fake is a transport that is available and usable unless told otherwise.
type fake struct {
	name               string
	unavailable, unfit error
}

func (f *fake) Name() string                         { return f.name }
func (f *fake) Caps() transport.Caps                 { return transport.Caps{} }
func (f *fake) Available() error                     { return f.unavailable }
func (f *fake) LocalBlob() []byte                    { return []byte(f.name) }
func (f *fake) Usable(_, _ transport.PeerInfo) error { return f.unfit }
func (f *fake) Devices() transport.Devices           { return transport.Devices{} }
func (f *fake) Connect(context.Context, transport.Params) (transport.Endpoint, error) {
	return nil, errors.New("not here")
}

func table(policy string, ts ...*fake) (*Table, *[]string) {
	var heard []string
	n := &Table{Policy: policy, Transports: map[string]transport.Transport{},
		Available:  func(t transport.Transport) error { return t.Available() },
		NotAllowed: func(peer string, err error) { heard = append(heard, "refused "+peer) },
		FellBack: func(peer, name string, full bool, err error) {
			heard = append(heard, "fell back from "+name)
		},
		PeerGIDs: func(name string) func([]byte) ([][16]byte, error) {
			if name != "rdma" {
				return nil
			}
			return func(b []byte) ([][16]byte, error) { return [][16]byte{[16]byte(b)}, nil }
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, t := range ts {
		n.Names = append(n.Names, t.name)
		n.Transports[t.name] = t
	}
	return n, &heard
}

func names(os []wire.TransportOffer) string {
	var s []string
	for _, o := range os {
		s = append(s, o.Name)
	}
	return strings.Join(s, ",")
}

func TestOffers(t *testing.T) {
	n, _ := table(Auto, &fake{name: "rdma", unavailable: errors.New("no device")}, &fake{name: "shm"}, &fake{name: "tcp"})
	got, err := n.Offers(Auto, map[string]error{"shm": errors.New("failed")})
	if err != nil || names(got) != "tcp" {
		t.Fatalf("auto, less rdma (unavailable) and shm (excluded): %q, %v", names(got), err)
	}
	if _, err := n.Offers("rdma", nil); !errors.Is(err, ErrNoTransport) || !strings.Contains(err.Error(), "no device") {
		t.Fatalf("rdma alone, unavailable: %v", err)
	}
	n.Extra = "twin"
	n.Transports["twin"] = &fake{name: "twin"}
	if got, _ := n.Offers("tcp", nil); names(got) != "twin,tcp" {
		t.Fatalf("the extra transport goes first: %q", names(got))
	}
	if _, err := n.Offer("nope"); !errors.Is(err, ErrNoTransport) {
		t.Fatalf("an unknown transport alone: %v", err)
	}
}

func TestChoose(t *testing.T) {
	hello := func(policy string, names ...string) *wire.Hello {
		h := &wire.Hello{Policy: policy}
		for _, n := range names {
			h.Transports = append(h.Transports, wire.TransportOffer{Name: n, Blob: make([]byte, 16)})
		}
		return h
	}
	shm := &fake{name: "shm", unfit: transport.ErrNoRoom}
	n, heard := table(Auto, &fake{name: "rdma"}, shm, &fake{name: "tcp"})
	n.AllowedGIDs = [][16]byte{{1}}
	got, why := n.Choose(hello(Auto, "rdma", "shm", "tcp"), transport.PeerInfo{}, transport.PeerInfo{Addr: "peer:1"})
	if got == nil || got.Name() != "tcp" {
		t.Fatalf("chose %v (%s), want tcp", got, why)
	}
	if want := "refused peer:1,fell back from shm"; strings.Join(*heard, ",") != want {
		t.Fatalf("heard %q, want %q", *heard, want)
	}
	// Under a policy that names one transport, an unusable one is no
	// fallback: the peer is refused, and told why.
	n, heard = table("shm", shm, &fake{name: "tcp"})
	if got, why := n.Choose(hello("shm", "shm", "tcp"), transport.PeerInfo{}, transport.PeerInfo{}); got != nil || !strings.Contains(why, "this engine's policy is shm") {
		t.Fatalf("chose %v (%s)", got, why)
	}
	if len(*heard) != 0 {
		t.Fatalf("heard %q", *heard)
	}
	if got, why := n.Choose(hello(Auto), transport.PeerInfo{}, transport.PeerInfo{}); got != nil || why != "the peer offered no transport" {
		t.Fatalf("nothing offered: %v (%s)", got, why)
	}
}

func TestAcceptedPolicy(t *testing.T) {
	for _, c := range []struct{ hello, own, want string }{{Auto, Auto, Auto}, {Auto, "tcp", Auto}, {"tcp", Auto, "tcp"}} {
		if got := AcceptedPolicy(c.hello, c.own); got != c.want {
			t.Errorf("AcceptedPolicy(%s, %s) = %s, want %s", c.hello, c.own, got, c.want)
		}
	}
}

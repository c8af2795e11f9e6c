package xfer_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil/etcdtest"
)

// directoryBackends are the real directories the engine's tests run
// against: a coordinator (xfer coordinator's handler on loopback) and an
// etcd embedded in the test process. Each call gives a fresh URL.
func directoryBackends(t *testing.T) map[string]func(t *testing.T) string {
	t.Helper()
	return map[string]func(t *testing.T) string{
		"coordinator": func(t *testing.T) string {
			s := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
			t.Cleanup(s.Close)
			return s.URL
		},
		"etcd": func(t *testing.T) string {
			return "etcd://" + etcdtest.Start(t) + "/" + strings.ReplaceAll(t.Name(), "/", "-")
		},
	}
}

func openNode(t *testing.T, cfg xfer.Config) *xfer.Engine {
	t.Helper()
	if cfg.Transport == "" {
		cfg.Transport = xfer.PolicyTCP
	}
	cfg.MemoryMB = 4
	e, err := xfer.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestDirectoryEngine: an engine with a node ID registers its address,
// transports and exports; a peer finds a region by (node, name) and reads
// it through DialNode; Close removes the entry at once.
func TestDirectoryEngine(t *testing.T) {
	for name, backend := range directoryBackends(t) {
		t.Run(name, func(t *testing.T) {
			url := backend(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "mem-1"})
			b := openNode(t, xfer.Config{Directory: url})

			ent, err := b.LookupNode(ctx, "mem-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(ent.Addrs) != 1 || ent.Addrs[0] != a.Addr() || len(ent.Transports) != 1 || ent.Transports[0] != "tcp" || len(ent.Exports) != 0 {
				t.Fatalf("entry %+v, want addrs [%s], transports [tcp], no exports", ent, a.Addr())
			}

			r, err := a.NewRegion(8192, xfer.AccessRead)
			if err != nil {
				t.Fatal(err)
			}
			copy(r.Bytes(), "hello from mem-1")
			a.Export("blob", r)
			if ent, err = b.LookupNode(ctx, "mem-1"); err != nil {
				t.Fatal(err)
			}
			if len(ent.Exports) != 1 || ent.Exports[0] != (directory.Export{Name: "blob", Len: 8192}) {
				t.Fatalf("exports %+v after Export, want [blob 8192]", ent.Exports)
			}

			p, err := b.DialNode(ctx, "mem-1")
			if err != nil {
				t.Fatal(err)
			}
			desc, ok := p.Region("blob")
			if !ok {
				t.Fatal("the dialed node does not export blob")
			}
			buf, err := b.Alloc(16)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Read(ctx, buf.Bytes(), desc.At(0)); err != nil {
				t.Fatal(err)
			}
			if got := string(buf.Bytes()); got != "hello from mem-1" {
				t.Fatalf("read %q", got)
			}

			if err := a.SetService(ctx, "kv", "[::]:5555"); err != nil {
				t.Fatal(err)
			}
			if ent, err = b.LookupNode(ctx, "mem-1"); err != nil {
				t.Fatal(err)
			}
			if want := "127.0.0.1:5555"; ent.Services["kv"] != want {
				t.Fatalf("services %v, want kv at %s", ent.Services, want)
			}

			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.LookupNode(ctx, "mem-1"); !errors.Is(err, xfer.ErrUnknownNode) {
				t.Fatalf("lookup after Close: %v, want ErrUnknownNode", err)
			}
			if _, err := b.DialNode(ctx, "mem-1"); !errors.Is(err, xfer.ErrUnknownNode) || !strings.Contains(err.Error(), "mem-1") {
				t.Fatalf("dial after Close: %v, want ErrUnknownNode naming mem-1", err)
			}
		})
	}
}

// TestDirectoryForgedEntry: an entry carries no secret and no region key,
// and an entry forged by a node that does not know the secret (the real
// node's ID, the attacker's address) leads the dialer to a handshake that
// fails with ErrAuth.
func TestDirectoryForgedEntry(t *testing.T) {
	for name, backend := range directoryBackends(t) {
		t.Run(name, func(t *testing.T) {
			url := backend(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const secret = "the-cluster-secret"
			a := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "mem-1", Secret: secret})
			r, err := a.NewRegion(4096, xfer.AccessReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			a.Export("pages", r)
			raw, err := func() ([]byte, error) { ent := a.Entry(); return ent.Marshal() }()
			if err != nil {
				t.Fatal(err)
			}
			d := r.Desc()
			for _, leak := range []string{secret, strconv.FormatUint(d.Key, 10), strconv.FormatUint(d.Key, 16), d.String()} {
				if strings.Contains(string(raw), leak) {
					t.Fatalf("the entry %s carries %q", raw, leak)
				}
			}

			b := openNode(t, xfer.Config{Directory: url, Secret: secret})
			if _, err := b.DialNode(ctx, "mem-1"); err != nil {
				t.Fatalf("dial the real node: %v", err)
			}

			// The attacker listens, without the secret, and overwrites
			// mem-1's entry with its own address.
			m := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Secret: "a-guess-of-the-secret"})
			forger, err := directory.Open(ctx, url, directory.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer forger.Close()
			// Registration is create-if-absent, so the attacker, with
			// write access to the directory, removes the entry first.
			if err := forger.Deregister(ctx, "mem-1"); err != nil {
				t.Fatal(err)
			}
			if err := forger.Register(ctx, directory.Entry{NodeID: "mem-1", Addrs: []string{m.Addr()}, Transports: []string{"tcp"}, Exports: []directory.Export{{Name: "pages", Len: 4096}}}); err != nil {
				t.Fatal(err)
			}
			c := openNode(t, xfer.Config{Directory: url, Secret: secret})
			p, err := c.DialNode(ctx, "mem-1")
			if !errors.Is(err, xfer.ErrAuth) {
				t.Fatalf("dial a forged entry: peer %v, err %v; want ErrAuth", p, err)
			}
			if !strings.Contains(err.Error(), m.Addr()) {
				t.Errorf("the error %q does not name the address dialed", err)
			}
		})
	}
}

// TestDirectoryDialErrors: each way DialNode cannot reach a node has its
// own clear error.
func TestDirectoryDialErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p2p := openNode(t, xfer.Config{})
	if _, err := p2p.DialNode(ctx, "mem-1"); !errors.Is(err, xfer.ErrNoDirectory) {
		t.Errorf("p2p: %v, want ErrNoDirectory", err)
	}

	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	e := openNode(t, xfer.Config{Directory: coord.URL})
	if _, err := e.DialNode(ctx, "nobody"); !errors.Is(err, xfer.ErrUnknownNode) {
		t.Errorf("unknown node: %v, want ErrUnknownNode", err)
	}
	if _, err := e.DialNode(ctx, "not an id"); !errors.Is(err, directory.ErrInvalid) {
		t.Errorf("malformed node id: %v, want directory.ErrInvalid", err)
	}

	// A node that died without deregistering: its entry outlives it
	// until its TTL, and dialing it is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	d, err := directory.Open(ctx, coord.URL, directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Register(ctx, directory.Entry{NodeID: "gone", Addrs: []string{dead}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DialNode(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "node gone at "+dead) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("gone node: %v, want an error naming the node, its address and the refusal", err)
	}

	coord.Close()
	if _, err := e.DialNode(ctx, "gone"); !errors.Is(err, xfer.ErrDirectoryUnavailable) {
		t.Errorf("coordinator down: %v, want ErrDirectoryUnavailable", err)
	}
}

// TestDirectoryConfig: a node ID needs a directory and a listen address,
// and Open fails clearly when the directory cannot be reached.
func TestDirectoryConfig(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		cfg  xfer.Config
		want string
	}{
		{xfer.Config{Listen: ":0", NodeID: "n1"}, `node_id "n1": needs a directory`},
		{xfer.Config{Directory: "http://127.0.0.1:1", NodeID: "n1"}, `node_id "n1": a node registers where it listens`},
		{xfer.Config{Directory: "etcd://"}, "no etcd endpoint"},
		{xfer.Config{Listen: "127.0.0.1:0", Directory: "http://127.0.0.1:1", NodeID: "n1", MemoryMB: 1}, "register node n1 in directory http://127.0.0.1:1"},
	} {
		e, err := xfer.Open(ctx, c.cfg)
		if err == nil {
			e.Close()
			t.Errorf("%+v opened", c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestDirectoryEtcdDown: when the etcd behind an engine's directory stops,
// looking a node up fails with ErrDirectoryUnavailable within the caller's
// deadline rather than hanging, a peer already connected keeps working,
// and the engine still closes.
func TestDirectoryEtcdDown(t *testing.T) {
	host, stop := etcdtest.StartStoppable(t)
	url := "etcd://" + host + "/" + t.Name()
	srv := openNode(t, xfer.Config{Directory: url, NodeID: "srv", Listen: "127.0.0.1:0"})
	r, err := srv.NewRegion(4096, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	srv.Export("page", r)
	cli := openNode(t, xfer.Config{Directory: url})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cli.DialNode(ctx, "srv")
	if err != nil {
		t.Fatal(err)
	}
	desc, ok := p.Region("page")
	if !ok {
		t.Fatal("the server's export is not listed")
	}
	buf, err := cli.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}

	stop() // an embedded etcd with clients connected takes some 7 s to stop
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = cli.LookupNode(short, "srv")
	if !errors.Is(err, xfer.ErrDirectoryUnavailable) {
		t.Fatalf("etcd stopped: %v, want ErrDirectoryUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the lookup took %v with a 2 s deadline", d)
	}
	if !strings.Contains(err.Error(), host) {
		t.Errorf("%v: does not name the directory %s", err, host)
	}
	if err := p.Read(ctx, buf.Bytes(), desc.At(0)); err != nil {
		t.Errorf("a peer connected before etcd stopped: %v", err)
	}
	// The server cannot remove its entry (the lease expires instead):
	// Close reports that, and does not wait long for it.
	start = time.Now()
	err = srv.Close()
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Close took %v with the directory gone", d)
	}
	t.Logf("Close with the directory gone: %v in %v", err, time.Since(start))
	if err == nil {
		t.Error("Close reported no error though its entry could not be removed")
	}
}

// TestDirectoryOneOwner: a second engine that claims a live node ID fails
// to open, with an error naming the ID and the holder's address; the
// holder keeps its entry, and once it closes the ID can be registered
// again.
func TestDirectoryOneOwner(t *testing.T) {
	for name, backend := range directoryBackends(t) {
		t.Run(name, func(t *testing.T) {
			url := backend(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "dup", Transport: xfer.PolicyTCP, MemoryMB: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "dup", Transport: xfer.PolicyTCP, MemoryMB: 4})
			if err == nil {
				b.Close()
				t.Fatal("a second engine opened with a live node ID")
			}
			if !errors.Is(err, directory.ErrTaken) || !strings.Contains(err.Error(), "dup") || !strings.Contains(err.Error(), a.Addr()) {
				t.Fatalf("second engine: %v; want ErrTaken naming dup and %s", err, a.Addr())
			}
			c := openNode(t, xfer.Config{Directory: url})
			for range 10 {
				if ent, err := c.LookupNode(ctx, "dup"); err != nil || ent.Addrs[0] != a.Addr() {
					t.Fatalf("lookup: %+v, %v; want the holder at %s", ent, err, a.Addr())
				}
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			d := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "dup"})
			if ent, err := c.LookupNode(ctx, "dup"); err != nil || ent.Addrs[0] != d.Addr() {
				t.Fatalf("lookup after the restart: %+v, %v; want %s", ent, err, d.Addr())
			}
		})
	}
}

// TestDirectoryEntryHeals: etcd stops for longer than the entry's TTL and
// starts again on its data; the engine's lease was lost, and it registers
// again: the status and the metrics say so, and the node can be dialed.
func TestDirectoryEntryHeals(t *testing.T) {
	x := etcdtest.StartRestartable(t)
	url := "etcd://" + x.Host + "/" + t.Name()
	reg := prometheus.NewRegistry()
	srv := openNode(t, xfer.Config{Directory: url, NodeID: "ek", Listen: "127.0.0.1:0", DirectoryTTL: 2 * time.Second, Metrics: reg})
	state := func() directory.Registration {
		d := srv.Status().Directory
		if d == nil || d.URL != url || d.Registration == nil {
			t.Fatalf("status: directory %+v", d)
		}
		return *d.Registration
	}
	if r := state(); r.State != directory.Registered || r.Reregistrations != 0 {
		t.Fatalf("after Open: %+v", r)
	}
	x.Stop()
	waitUntil(t, 30*time.Second, "lost", func() bool { return state().State == directory.Lost })
	if got := testutil.ToFloat64(stateGauge(t, reg, "lost")); got != 1 {
		t.Fatalf("xfer_directory_registration{state=lost} = %v, want 1", got)
	}
	x.Start()
	waitUntil(t, 30*time.Second, "registered again", func() bool {
		r := state()
		return r.State == directory.Registered && r.Reregistrations == 1
	})
	if got := testutil.ToFloat64(stateGauge(t, reg, "registered")); got != 1 {
		t.Fatalf("xfer_directory_registration{state=registered} = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "xfer_directory_reregistrations_total"); err != nil || n != 1 {
		t.Fatalf("xfer_directory_reregistrations_total: %d series, %v", n, err)
	}
	cli := openNode(t, xfer.Config{Directory: url})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	time.Sleep(3 * time.Second) // beyond the TTL: the lease etcd restored has expired
	if _, err := cli.DialNode(ctx, "ek"); err != nil {
		t.Fatalf("dial the node after the restart: %v", err)
	}
}

// stateGauge is the engine's xfer_directory_registration series for state.
func stateGauge(t *testing.T, reg *prometheus.Registry, state string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xfer_directory_registration" {
			continue
		}
		for _, m := range mf.Metric {
			if m.GetLabel()[0].GetValue() == state {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
				g.Set(m.GetGauge().GetValue())
				return g
			}
		}
	}
	t.Fatalf("no xfer_directory_registration{state=%q}", state)
	return nil
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDirectoryToken: against a coordinator with a token, an engine with
// directory_token_file registers and is found; one without cannot open
// with a node ID, and a forger without the token cannot replace the
// entry.
func TestDirectoryToken(t *testing.T) {
	const token = "the-coordinator-token-of-the-cluster"
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{Token: token}))
	defer coord.Close()
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte(token+"\n"), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Directory: coord.URL, NodeID: "mem-1", DirectoryTokenFile: file})
	if e, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 4, Directory: coord.URL, NodeID: "mem-2"}); err == nil {
		e.Close()
		t.Fatal("an engine without the token registered")
	}
	forger, err := directory.Open(ctx, coord.URL, directory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	if err := forger.Register(ctx, directory.Entry{NodeID: "mem-1", Addrs: []string{"127.0.0.1:1"}, Transports: []string{"tcp"}}); err == nil {
		t.Fatal("a forger without the token replaced the entry")
	}
	b := openNode(t, xfer.Config{Directory: coord.URL})
	if p, err := b.DialNode(ctx, "mem-1"); err != nil || p.ID() != a.ID() {
		t.Fatalf("dial the registered node: %v", err)
	}
}

// TestDirectoryTLSKeys: against an etcd that requires client certificates,
// an engine with directory_tls_cert, directory_tls_key and
// directory_tls_ca registers and is dialed by node ID; one without the
// certificate fails to open, with an error that names the keys to set.
func TestDirectoryTLSKeys(t *testing.T) {
	dir := t.TempDir()
	etcdtest.WritePKI(t, dir)
	f := func(name string) string { return filepath.Join(dir, name) }
	host := etcdtest.StartTLS(t, transport.TLSInfo{CertFile: f("server.pem"), KeyFile: f("server-key.pem"),
		TrustedCAFile: f("ca.pem"), ClientCertAuth: true})
	url := "etcd://" + host + "/xfer"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := openNode(t, xfer.Config{Listen: "127.0.0.1:0", Directory: url, NodeID: "tls-1",
		DirectoryTLSCert: f("client.pem"), DirectoryTLSKey: f("client-key.pem"), DirectoryTLSCA: f("ca.pem")})
	_, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 4, Directory: url, NodeID: "tls-2",
		DirectoryTLSCA: f("ca.pem")})
	if err == nil || !strings.Contains(err.Error(), "directory_tls_cert") {
		t.Fatalf("an engine without a client certificate: %v, want an error naming directory_tls_cert", err)
	}
	b := openNode(t, xfer.Config{Directory: url + "?" + "cert=" + f("client.pem") + "&key=" + f("client-key.pem") + "&ca=" + f("ca.pem")})
	if p, err := b.DialNode(ctx, "tls-1"); err != nil || p.ID() != a.ID() {
		t.Fatalf("dial the registered node: %v", err)
	}
}

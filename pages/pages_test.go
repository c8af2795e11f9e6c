package pages

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
)

// policies are the transports the tests run on: tcp and shm on the host,
// rdma inside the VM.
func policies(t testing.TB) []xfer.Policy {
	if os.Getenv(testutil.EnvRDMAVM) != "" {
		return []xfer.Policy{xfer.PolicyRDMA}
	}
	return []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM}
}

func engineConfig(t testing.TB, policy xfer.Policy) xfer.Config {
	cfg := xfer.Config{Transport: policy, MemoryMB: 8}
	if policy == xfer.PolicyRDMA {
		cfg.RDMA.Device = testutil.RequireVerbs(t)
	}
	return cfg
}

// stamp fills page i of mem with a pattern that names the page.
func stamp(mem []byte, pageSize int, seed uint64) {
	for off := 0; off+8 <= len(mem); off += 8 {
		binary.LittleEndian.PutUint64(mem[off:], seed^uint64(off/pageSize)<<32^uint64(off))
	}
}

func newServer(t testing.TB, policy xfer.Policy, size int64, seed uint64) *Server {
	t.Helper()
	return newServerConfig(t, policy, ServerConfig{Size: size}, seed)
}

func newServerConfig(t testing.TB, policy xfer.Policy, sc ServerConfig, seed uint64) *Server {
	t.Helper()
	cfg := engineConfig(t, policy)
	cfg.Listen = "127.0.0.1:0"
	sc.Engine = cfg
	s, err := NewServer(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	stamp(s.Memory(), s.PageSize(), seed)
	return s
}

func newClient(t testing.TB, policy xfer.Policy) *Client {
	t.Helper()
	c, err := NewClient(context.Background(), ClientConfig{Engine: engineConfig(t, policy)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newCluster starts a server of size bytes for each seed (stamped with it)
// and a client that adds them one after the other from GPA 0, with n page
// buffers. The test's end frees the buffers and closes the client and the
// servers.
func newCluster(t testing.TB, policy xfer.Policy, size int64, n int, seeds ...uint64) (*Client, []xfer.Buffer, []*Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := make([]*Server, len(seeds))
	for i, seed := range seeds {
		srv[i] = newServer(t, policy, size, seed)
	}
	c := newClient(t, policy)
	for i, s := range srv {
		if err := c.AddNode(ctx, s.Addr(), uint64(i)*uint64(size)); err != nil {
			t.Fatal(err)
		}
	}
	bufs, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Free(bufs) })
	return c, bufs, srv
}

func TestPages(t *testing.T) {
	for _, policy := range policies(t) {
		t.Run(string(policy), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const size = 1 << 20 // 256 pages per node
			a, b := newServer(t, policy, size, 0xa), newServerConfig(t, policy, ServerConfig{Size: size, Writable: true}, 0xb)
			c := newClient(t, policy)
			if err := c.AddNode(ctx, a.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			if err := c.AddNode(ctx, b.Addr(), size); err != nil {
				t.Fatal(err)
			}
			bufs, err := c.Alloc(4)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Free(bufs)
			page := func(s *Server, i int) []byte { return s.Memory()[i*PageSize4K : (i+1)*PageSize4K] }

			// One page from each node.
			if err := c.FetchPage(ctx, 7*PageSize4K, bufs[0].Bytes()); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bufs[0].Bytes(), page(a, 7)) {
				t.Fatal("page 7 of node a: wrong data")
			}
			if err := c.FetchPage(ctx, size+9*PageSize4K, bufs[0].Bytes()); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bufs[0].Bytes(), page(b, 9)) {
				t.Fatal("page 9 of node b: wrong data")
			}

			// Many at once, across both nodes.
			gpas := []uint64{0, size - PageSize4K, size, 2*size - PageSize4K}
			pbufs := [][]byte{bufs[0].Bytes(), bufs[1].Bytes(), bufs[2].Bytes(), bufs[3].Bytes()}
			for _, p := range pbufs {
				clear(p)
			}
			if err := c.FetchPages(ctx, gpas, pbufs); err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]byte{page(a, 0), page(a, 255), page(b, 0), page(b, 255)} {
				if !bytes.Equal(pbufs[i], want) {
					t.Fatalf("FetchPages: page %d (GPA %#x): wrong data", i, gpas[i])
				}
			}

			// A page written back lands in the server's memory, if the
			// server is writable; a read-only one refuses it.
			for i := range pbufs[0] {
				pbufs[0][i] = byte(i * 13)
			}
			before := bytes.Clone(page(a, 3))
			if err := c.WritePage(ctx, 3*PageSize4K, pbufs[0]); !errors.Is(err, xfer.ErrRemoteAccess) {
				t.Fatalf("WritePage to a read-only server: %v, want a remote access error", err)
			}
			if !bytes.Equal(page(a, 3), before) {
				t.Fatal("WritePage to a read-only server changed its page")
			}
			if err := c.WritePage(ctx, size+3*PageSize4K, pbufs[0]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(page(b, 3), pbufs[0]) {
				t.Fatal("WritePage: the server's page differs")
			}

			// Prefetched pages come from the cache, with the right data.
			c.Prefetch(ctx, []uint64{20 * PageSize4K, 21 * PageSize4K, 1 << 40})
			for _, i := range []int{20, 21} {
				clear(pbufs[1])
				if err := c.FetchPage(ctx, uint64(i)*PageSize4K, pbufs[1]); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(pbufs[1], page(a, i)) {
					t.Fatalf("prefetched page %d: wrong data", i)
				}
			}

			if l := c.Latency(); l.Count != 1+1+4+2 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 {
				t.Fatalf("latency: %+v, want 8 fetches recorded, ordered quantiles", l)
			}
			t.Logf("%s: %+v", policy, c.Latency())
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, bufs, srv := newCluster(t, xfer.PolicyTCP, 64<<10, 1, 1)
	s := srv[0]
	buf := bufs[0].Bytes()
	if err := c.FetchPage(ctx, 100, buf); !errors.Is(err, ErrUnaligned) {
		t.Errorf("unaligned GPA: %v", err)
	}
	if err := c.FetchPage(ctx, 64<<10, buf); !errors.Is(err, ErrNoNode) {
		t.Errorf("GPA past the node: %v", err)
	}
	if err := c.FetchPage(ctx, 0, buf[:100]); !errors.Is(err, ErrBuffer) {
		t.Errorf("short buffer: %v", err)
	}
	if err := c.FetchPage(ctx, 0, make([]byte, PageSize4K)); !errors.Is(err, xfer.ErrNotRegistered) {
		t.Errorf("heap buffer: %v", err)
	}
	if err := c.FetchPages(ctx, []uint64{0, 1 << 30}, [][]byte{buf, buf}); !errors.Is(err, ErrNoNode) {
		t.Errorf("a batch with a GPA no node owns: %v", err)
	}
	s2 := newServer(t, xfer.PolicyTCP, 64<<10, 2)
	if err := c.AddNode(ctx, s2.Addr(), 32<<10); err == nil {
		t.Error("an overlapping node was added")
	}
	if err := c.AddNode(ctx, s2.Addr(), 5); !errors.Is(err, ErrUnaligned) {
		t.Errorf("a node at an unaligned base: %v", err)
	}
	if _, err := NewServer(ctx, ServerConfig{Engine: xfer.Config{Listen: "127.0.0.1:0"}, Size: 5000}); err == nil {
		t.Error("a server of 5000 bytes of 4 KiB pages")
	}
	if _, err := NewServer(ctx, ServerConfig{Engine: xfer.Config{Listen: "127.0.0.1:0"}, Size: 1 << 20, PageSize: 8192}); err == nil {
		t.Error("a server with 8 KiB pages")
	}

	// A node that goes away: the fetch fails within its deadline.
	s.Close()
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
	defer fcancel()
	start := time.Now()
	err := c.FetchPage(fctx, 0, buf)
	if err == nil {
		t.Fatal("a fetch from a closed server succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the fetch from a closed server took %v, past its 2 s deadline", d)
	}
	t.Logf("fetch from a closed server: %v", err)
}

func TestHugePages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.PolicyTCP}
	s, err := NewServer(ctx, ServerConfig{Engine: cfg, Size: 4 * PageSize2M, PageSize: PageSize2M})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stamp(s.Memory(), PageSize2M, 5)
	c, err := NewClient(ctx, ClientConfig{Engine: xfer.Config{Transport: xfer.PolicyTCP, MemoryMB: 16}, PageSize: PageSize2M, CachePages: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddNode(ctx, s.Addr(), 1<<30); err != nil {
		t.Fatal(err)
	}
	bufs, err := c.Alloc(1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(bufs)
	if err := c.FetchPage(ctx, 1<<30+2*PageSize2M, bufs[0].Bytes()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bufs[0].Bytes(), s.Memory()[2*PageSize2M:3*PageSize2M]) {
		t.Fatal("2 MiB page 2: wrong data")
	}
	// A 4 KiB client is refused a 2 MiB server.
	c4, err := NewClient(ctx, ClientConfig{Engine: xfer.Config{Transport: xfer.PolicyTCP}})
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if err := c4.AddNode(ctx, s.Addr(), 0); err == nil || !strings.Contains(err.Error(), "another size") {
		t.Fatalf("a 4 KiB client added a 2 MiB server: %v", err)
	}
}

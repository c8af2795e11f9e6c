package xfer_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mem"
)

// TestGPUNotAvailable is what a host without CUDA says: every way to ask
// for GPU memory fails with ErrCUDANotAvailable and says why and what to
// do; nothing else in the engine changes.
func TestGPUNotAvailable(t *testing.T) {
	if testutil.FakeCUDAInUse() {
		// This process has the stand-in driver: ask a child without it.
		cmd := exec.Command(os.Args[0], "-test.run=^TestGPUNotAvailable$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), testutil.EnvNoFakeCUDA+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestGPUNotAvailable") {
			t.Fatalf("in a process without CUDA: %v\n%s", err, out)
		}
		return
	}
	ctx := context.Background()
	e, err := xfer.Open(ctx, xfer.Config{MemoryDevice: mem.CUDA(0)})
	if err == nil {
		e.Close()
		t.Skip("this host has a CUDA GPU")
	}
	if !errors.Is(err, xfer.ErrCUDANotAvailable) || !strings.Contains(err.Error(), "CUDA is not available") || !strings.Contains(err.Error(), "cuda:0") {
		t.Fatalf("Open with memory_device cuda:0: %v", err)
	}
	// memory: cuda:0 is the same.
	if _, err := xfer.Open(ctx, xfer.Config{Memory: "cuda:0"}); !errors.Is(err, xfer.ErrCUDANotAvailable) {
		t.Fatalf("Open with memory cuda:0: %v", err)
	}
	e, err = xfer.Open(ctx, xfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.NewDeviceRegion(0, 1<<20, xfer.AccessReadWrite); !errors.Is(err, xfer.ErrCUDANotAvailable) {
		t.Fatalf("NewDeviceRegion: %v", err)
	}
	if _, err := e.RegisterDevice(0x7f0000000000, 4096, xfer.AccessReadWrite); !errors.Is(err, xfer.ErrCUDANotAvailable) {
		t.Fatalf("RegisterDevice: %v", err)
	}
	if loc := e.DefaultRegion().Location(); !loc.IsHost() {
		t.Fatalf("default pool in %s", loc)
	}
	// Host to host, Copy is copy.
	a, b := []byte("hello"), make([]byte, 5)
	if err := e.Copy(b, a); err != nil || string(b) != "hello" {
		t.Fatalf("Copy host to host: %q %v", b, err)
	}
	if err := e.Copy(b[:4], a); err == nil {
		t.Fatal("Copy of different lengths passed")
	}
}

func TestGPUConfig(t *testing.T) {
	ctx := context.Background()
	_, err := xfer.Open(ctx, xfer.Config{Memory: "cuda:0", MemoryDevice: mem.CUDA(1)})
	if err == nil || !strings.Contains(err.Error(), "different GPUs") {
		t.Fatalf("memory cuda:0 with memory_device cuda:1: %v", err)
	}
	for _, bad := range []string{"cuda:x", "cuda:-1", "cuda:256", "tpu:0"} {
		if _, err := mem.ParseLocation(bad); err == nil {
			t.Errorf("ParseLocation(%q) passed", bad)
		}
		if _, err := xfer.ParseMemoryBacking(bad); err == nil {
			t.Errorf("ParseMemoryBacking(%q) passed", bad)
		}
	}
	for in, want := range map[string]string{"": "host", "cpu": "host", "cuda": "cuda:0", "GPU:3": "cuda:3", " cuda:1 ": "cuda:1"} {
		l, err := mem.ParseLocation(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseLocation(%q) = %v, %v; want %s", in, l, err, want)
		}
	}
}

// gpuPair is two engines connected over pol, with memory of both kinds on
// each side: a GPU region and a host region, exported.
type gpuPair struct {
	srv, cli *xfer.Engine
	peer     *xfer.Peer
	regions  map[string]xfer.RegionDesc // the server's, by kind
	local    map[string]*xfer.Region    // the client's, by kind
	target   map[string]*xfer.Region    // the server's, by kind
}

func newGPUPair(t *testing.T, pol xfer.Policy, size int) *gpuPair {
	t.Helper()
	ctx := context.Background()
	srv, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Transport: pol, MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := xfer.Open(ctx, xfer.Config{Transport: pol, MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p := &gpuPair{srv: srv, cli: cli, regions: map[string]xfer.RegionDesc{}, local: map[string]*xfer.Region{}, target: map[string]*xfer.Region{}}
	for _, e := range []*xfer.Engine{srv, cli} {
		for _, kind := range []string{"host", "gpu"} {
			var r *xfer.Region
			if kind == "gpu" {
				r, err = e.NewDeviceRegion(0, size, xfer.AccessReadWrite)
			} else {
				r, err = e.NewRegion(size, xfer.AccessReadWrite)
			}
			if err != nil {
				t.Fatal(err)
			}
			if e == srv {
				srv.Export(kind, r)
				p.target[kind] = r
			} else {
				p.local[kind] = r
			}
		}
	}
	if p.peer, err = cli.Dial(ctx, srv.Addr()); err != nil {
		t.Fatal(err)
	}
	if p.peer.Transport() != string(pol) {
		t.Fatalf("transport %s, want %s", p.peer.Transport(), pol)
	}
	for _, kind := range []string{"host", "gpu"} {
		d, ok := p.peer.Region(kind)
		if !ok {
			t.Fatalf("no region %s", kind)
		}
		if want := map[string]bool{"host": true, "gpu": false}[kind]; d.Memory.IsHost() != want {
			t.Fatalf("region %s: descriptor says %s", kind, d.Memory)
		}
		p.regions[kind] = d
	}
	return p
}

// pattern is n pseudo-random bytes from seed.
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestGPUTransfers moves bytes between every pair of memory kinds, in
// both directions, with WRITE, READ and write-with-notify, over tcp
// (staging through pinned host memory on both sides) and shm (the GPU's
// copy engines; between engines of one process the device addresses need
// no IPC handle: tools/gpu/check.sh runs the two-process path, CUDA IPC,
// through xfer bench), of 1 byte,
// 1 MiB and 9 MiB plus 3 bytes (pieces and a remainder), MD5 verified
// through the remote side's own copy.
func TestGPUTransfers(t *testing.T) {
	testutil.RequireCUDA(t)
	const size = 16 << 20
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(pol), func(t *testing.T) {
			p := newGPUPair(t, pol, size)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			seed := uint64(1)
			for _, n := range []int{1, 1 << 20, 9<<20 + 3} {
				for _, lk := range []string{"host", "gpu"} {
					for _, rk := range []string{"host", "gpu"} {
						for _, op := range []string{"write", "read", "notify"} {
							seed++
							name := fmt.Sprintf("%s/%s-%s/%d", op, lk, rk, n)
							local := p.local[lk].Bytes()[4096 : 4096+n]
							remote := p.regions[rk]
							want := pattern(n, seed)
							// Put want where the operation takes it from.
							src := local
							if op == "read" {
								src = p.target[rk].Bytes()[8192 : 8192+n]
							}
							if err := copyInto(p, src, want); err != nil {
								t.Fatalf("%s: fill: %v", name, err)
							}
							var err error
							switch op {
							case "write":
								err = p.peer.Write(ctx, local, remote.At(8192))
							case "read":
								err = p.peer.Read(ctx, local, remote.At(8192))
							case "notify":
								err = p.peer.WriteNotify(ctx, local, remote.At(8192), uint32(seed))
							}
							if err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if op == "notify" {
								nt, err := p.srv.WaitNotify(ctx)
								if err != nil || nt.Value != uint32(seed) {
									t.Fatalf("%s: notification %+v, %v", name, nt, err)
								}
							}
							dst := p.target[rk].Bytes()[8192 : 8192+n]
							if op == "read" {
								dst = local
							}
							got := make([]byte, n)
							if err := copyInto(p, got, dst); err != nil {
								t.Fatalf("%s: look: %v", name, err)
							}
							if md5.Sum(got) != md5.Sum(want) {
								t.Fatalf("%s: MD5 differs (first bytes %x, want %x)", name, got[:min(n, 8)], want[:min(n, 8)])
							}
						}
					}
				}
			}
		})
	}
}

// copyInto copies between host memory and either engine's memory: the
// driver tells the client's engine where the server's GPU memory is.
func copyInto(p *gpuPair, dst, src []byte) error { return p.cli.Copy(dst, src) }

// TestGPUConcurrent runs many staged and copied operations at once, in
// batches and from goroutines, on a GPU pool: no piece of one may land in
// another.
func TestGPUConcurrent(t *testing.T) {
	testutil.RequireCUDA(t)
	for _, pol := range []xfer.Policy{xfer.PolicyTCP, xfer.PolicySHM} {
		t.Run(string(pol), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			srv, err := xfer.Open(ctx, xfer.Config{Listen: "127.0.0.1:0", Transport: pol, MemoryDevice: mem.CUDA(0), MemoryMB: 256})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			srv.Export("data", srv.DefaultRegion())
			cli, err := xfer.Open(ctx, xfer.Config{Transport: pol, MemoryDevice: mem.CUDA(0), MemoryMB: 256})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			peer, err := cli.Dial(ctx, srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			remote, _ := peer.Region("data")
			const workers, n = 8, 5<<20 + 7
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					buf, err := cli.Alloc(n)
					if err != nil {
						errs <- err
						return
					}
					back, err := cli.Alloc(n)
					if err != nil {
						errs <- err
						return
					}
					for i := range 4 {
						want := pattern(n, uint64(w*100+i))
						if err := cli.Copy(buf.Bytes(), want); err != nil {
							errs <- err
							return
						}
						at := remote.At(uint64(w) * (8 << 20))
						b := peer.Submit([]xfer.Op{{Kind: xfer.OpWrite, Local: buf.Bytes(), Remote: at}})
						if err := b.Wait(ctx); err != nil {
							errs <- fmt.Errorf("worker %d write %d: %w", w, i, err)
							return
						}
						if err := peer.Read(ctx, back.Bytes(), at); err != nil {
							errs <- fmt.Errorf("worker %d read %d: %w", w, i, err)
							return
						}
						got := make([]byte, n)
						if err := cli.Copy(got, back.Bytes()); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(got, want) {
							errs <- fmt.Errorf("worker %d round %d: the bytes read back differ", w, i)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// The status says where the pool is, and the pinned staging
			// memory, none of it held now: tcp stages every operation, shm
			// those posted while the peer's region was being attached.
			st := cli.Status()
			if st.Pool.Memory != "cuda:0" || st.GPU == nil || len(st.GPU.Devices) != 1 || st.GPU.Devices[0] != 0 {
				t.Fatalf("status: pool in %q, GPU %+v", st.Pool.Memory, st.GPU)
			}
			staged := st.GPU.StagingBytes > 0
			if pol == xfer.PolicyTCP && !staged || st.GPU.StagingUsedBytes != 0 || staged && !st.GPU.StagingPinned {
				t.Errorf("status over %s: GPU %+v", pol, *st.GPU)
			}
		})
	}
}

// TestGPURegisterDevice registers GPU memory allocated elsewhere (here by
// another region's allocation, as a framework's tensor would be) and
// refuses memory the driver does not know as GPU memory.
func TestGPURegisterDevice(t *testing.T) {
	testutil.RequireCUDA(t)
	ctx := context.Background()
	e, err := xfer.Open(ctx, xfer.Config{MemoryMB: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	other, err := xfer.Open(ctx, xfer.Config{MemoryDevice: mem.CUDA(0), MemoryMB: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	b := other.DefaultRegion().Bytes()
	r, err := e.RegisterDevice(addrOfBytes(b[4096:]), 1<<20, xfer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if r.Location() != mem.CUDA(0) || len(r.Bytes()) != 1<<20 {
		t.Fatalf("registered %s, %d bytes", r.Location(), len(r.Bytes()))
	}
	r.Close()
	if _, err := e.RegisterDevice(addrOfBytes(b[len(b)-4096:]), 1<<20, xfer.AccessReadWrite); err == nil {
		t.Fatal("RegisterDevice past the end of the allocation passed")
	}
	host := e.DefaultRegion().Bytes()
	if _, err := e.RegisterDevice(addrOfBytes(host), 4096, xfer.AccessReadWrite); !errors.Is(err, mem.ErrNotDevice) {
		t.Fatalf("RegisterDevice of host memory: %v", err)
	}
}

func addrOfBytes(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/kv/disktier"
)

// selfChecking is a value of n bytes that says which key and version it
// is: its first 16 bytes are both, the rest a pattern of them. check
// tells a whole one from a torn or corrupt one.
func selfChecking(key, ver uint64, n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, key)
	binary.LittleEndian.PutUint64(b[8:], ver)
	x := key*0x9e3779b97f4a7c15 ^ ver
	for i := 16; i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

// checkSelf returns the key and version of v, or an error when v is not
// the whole value selfChecking made for them.
func checkSelf(v []byte, n int) (key, ver uint64, err error) {
	if len(v) != n {
		return 0, 0, fmt.Errorf("%d bytes, want %d", len(v), n)
	}
	key, ver = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[8:])
	if string(v) != string(selfChecking(key, ver, n)) {
		return key, ver, fmt.Errorf("value of key %d version %d is corrupt", key, ver)
	}
	return key, ver, nil
}

// phaseCtx is a context for one phase of TestDiskTier: two minutes.
func phaseCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestDiskTier: 256 values of 1 MiB through a server with a 64 MiB pool
// and a 1 GiB disk tier all read back checked, over tcp and shm; the
// server restarted on the same directory, they all read back checked
// again, from disk.
func TestDiskTier(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { testDiskTier(t, tr) })
	}
}

func testDiskTier(t *testing.T, tr xfer.Policy) {
	const n, size = 256, 1 << 20
	dir := t.TempDir()
	// No read leases: a GET's lease keeps its value in memory for 10 s
	// by default, and 256 reads would hold the pool.
	opts := ServerOptions{Engine: xfer.Config{MemoryMB: 64}, DiskDir: dir, DiskSize: 1 << 30, LeaseTTL: -1}
	s := startServer(t, opts)
	c := dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: 8}})
	// Each phase gets its own deadline, roomy: under the race detector a
	// phase of 256 MiB through the disk takes some 25 s on a 2-core host.
	ctx := phaseCtx(t)
	buf, err := c.Engine().Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Engine().Free(buf)
	start := time.Now()
	for i := range n {
		copy(buf.Bytes(), selfChecking(uint64(i), 1, size))
		if err := c.PutBuffer(ctx, fmt.Sprint(i), buf, size); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	readAll := func(c *Client, what string) {
		t.Helper()
		for i := range n {
			got, err := c.GetInto(ctx, fmt.Sprint(i), buf)
			if err != nil {
				t.Fatalf("%s: get %d: %v", what, i, err)
			}
			if k, _, err := checkSelf(buf.Bytes()[:got], size); err != nil || k != uint64(i) {
				t.Fatalf("%s: get %d: key %d, %v", what, i, k, err)
			}
		}
	}
	readAll(c, "first read")
	st := s.Snapshot()
	t.Logf("%s: %d values of 1 MiB put and read back in %v: %+v", tr, n, time.Since(start).Round(time.Millisecond), *st.Disk)
	if st.Keys != n || st.Disk.Demotions == 0 || st.Disk.Hits == 0 || st.Disk.Promotions == 0 || st.Evictions == 0 {
		t.Fatalf("%d keys, disk tier %+v: want %d keys, values demoted and promoted", st.Keys, *st.Disk, n)
	}
	if st.Disk.Corrupt+st.Disk.DroppedRead+st.Disk.DroppedWriteError+st.Disk.DroppedTooLarge != 0 {
		t.Fatalf("disk tier errors: %+v", *st.Disk)
	}
	c.Close()
	s.stop() // Close writes what is only in memory

	s = startServer(t, opts)
	ctx = phaseCtx(t) // readAll reads ctx
	if st := s.Snapshot(); st.Keys != n || st.Disk.Keys != n {
		t.Fatalf("restarted: %d keys, %d on disk, want %d", st.Keys, st.Disk.Keys, n)
	}
	c = dialOpts(t, s.addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: 8}})
	buf2, err := c.Engine().Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Engine().Free(buf2)
	buf = buf2
	readAll(c, "after the restart")
	if st := s.Snapshot(); st.Disk.Hits < n {
		t.Fatalf("after the restart %d disk hits, want %d", st.Disk.Hits, n)
	}
}

// TestDiskTierOverwriteDelete: a value overwritten or deleted while on
// disk (or on its way there) does not come back, neither at once nor
// after a restart; the newest value does.
func TestDiskTierOverwriteDelete(t *testing.T) {
	dir := t.TempDir()
	opts := ServerOptions{Engine: xfer.Config{MemoryMB: 8}, DiskDir: dir, DiskSize: 64 << 20, LeaseTTL: -1}
	s := startServer(t, opts)
	c := dial(t, s.addr, xfer.PolicyTCP)
	ctx := ctxT(t)
	const n, size = 40, 512 << 10 // 20 MiB through 8 MiB of pool
	for ver := uint64(1); ver <= 3; ver++ {
		for i := range n {
			if ver == 3 && i%2 == 1 {
				continue
			}
			if err := c.Put(ctx, fmt.Sprint(i), selfChecking(uint64(i), ver, size)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		if i%4 == 1 {
			if err := c.DeleteWith(ctx, fmt.Sprint(i), DeleteOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(what string) {
		t.Helper()
		for i := range n {
			v, err := c.Get(ctx, fmt.Sprint(i))
			want := uint64(3)
			switch {
			case i%4 == 1:
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("%s: deleted key %d: %v", what, i, err)
				}
				continue
			case i%2 == 1:
				want = 2
			}
			if err != nil {
				t.Fatalf("%s: key %d: %v (%+v)", what, i, err, *s.Snapshot().Disk)
			}
			if k, ver, err := checkSelf(v, size); err != nil || k != uint64(i) || ver != want {
				t.Fatalf("%s: key %d: got key %d version %d (%v), want version %d", what, i, k, ver, err, want)
			}
		}
	}
	check("before the restart")
	c.Close()
	s.stop()
	s = startServer(t, opts)
	c = dial(t, s.addr, xfer.PolicyTCP)
	check("after the restart")
}

// TestDiskTierBadStart: a directory that is not one, a size too small or
// past the disk, and the reject policy, are clear errors at start.
func TestDiskTierBadStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    ServerOptions
		want string
	}{
		{ServerOptions{DiskDir: t.TempDir(), DiskSize: 4096}, "too small"},
		{ServerOptions{DiskDir: t.TempDir(), DiskSize: 1 << 60}, "free"},
		{ServerOptions{DiskDir: t.TempDir()}, "needs its size"},
		{ServerOptions{DiskDir: file, DiskSize: 8 << 20}, "directory"},
		{ServerOptions{DiskDir: t.TempDir(), DiskSize: 8 << 20, Full: Reject}, "reject"},
	} {
		c.o.Engine = xfer.Config{Listen: "127.0.0.1:0", MemoryMB: 8}
		s, err := NewServer(context.Background(), c.o)
		if err == nil {
			s.Close()
			t.Errorf("%+v: no error", c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %q, want one that says %q", err, c.want)
		}
	}
}

// diskServerEnv runs the test binary as a KV server with a disk tier
// (diskServerProcess): "POLICY DIR".
const diskServerEnv = "XFER_KV_DISK_SERVER"

// Sizes of TestDiskTierKill.
const (
	killValue = 256 << 10
	killKeys  = 64
)

func diskServerProcess(spec string) error {
	policy, dir, _ := strings.Cut(spec, " ")
	ctx := context.Background()
	s, err := NewServer(ctx, ServerOptions{Engine: xfer.Config{Listen: "127.0.0.1:0", Transport: xfer.Policy(policy), MemoryMB: 4},
		DiskDir: dir, DiskSize: 8 << 20, LeaseTTL: -1})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(lis.Addr().String())
	return s.Serve(ctx, lis)
}

// TestDiskTierKill: 20 rounds of a server with a disk tier, a process of
// its own, SIGKILLed at a random moment while a client overwrites values
// (the pool holds 16 of them, the disk 32, so values are written, read
// back, overwritten and evicted from disk all the time), then started
// again on the same directory: every value it serves is whole and no
// older than the last acknowledged PUT of its key (0 corrupt, 0 stale).
func TestDiskTierKill(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { testDiskTierKill(t, tr) })
	}
}

func testDiskTierKill(t *testing.T, tr xfer.Policy) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, uint64(len(tr))))
	acked := make([]uint64, killKeys) // the last acknowledged version of each key
	ver := uint64(0)
	served, corrupt, stale := 0, 0, 0
	start := func() (*exec.Cmd, *Client) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), diskServerEnv+"="+string(tr)+" "+dir)
		cmd.Stderr = os.Stderr
		addr := testutil.StartProcess(t, cmd)
		return cmd, dialOpts(t, addr, ClientOptions{EngineConfig: xfer.Config{Transport: tr, MemoryMB: 4}})
	}
	for round := range 20 {
		cmd, c := start()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		// What the server serves after the last round's kill.
		for k := range killKeys {
			v, err := c.Get(ctx, fmt.Sprint(k))
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("round %d: get %d: %v", round, k, err)
			}
			served++
			key, got, err := checkSelf(v, killValue)
			switch {
			case err != nil || key != uint64(k):
				corrupt++
				t.Errorf("round %d: key %d: a corrupt value (key %d): %v", round, k, key, err)
			case got < acked[k]:
				stale++
				t.Errorf("round %d: key %d: version %d, older than the acknowledged %d", round, k, got, acked[k])
			}
		}
		// Overwrite and read until killed: the kill is armed after 20 to 40
		// writes (more than the pool holds, so that values have gone to
		// disk, however slow the transport: rxe in the VM moves some
		// 20 MB/s) and lands 0 to 50 ms later, in the middle of the writes
		// that follow.
		wctx, stop := context.WithCancel(ctx) // ends the call the kill interrupts at once
		var timer *time.Timer
		for writes, arm := 0, 20+rng.IntN(21); ; {
			if timer == nil && writes >= arm {
				kill := time.Duration(rng.IntN(51)) * time.Millisecond
				timer = time.AfterFunc(kill, func() { cmd.Process.Signal(syscall.SIGKILL); stop() })
			}
			k := rng.IntN(killKeys)
			var err error
			if rng.IntN(4) == 0 {
				_, err = c.Get(wctx, fmt.Sprint(k))
				if errors.Is(err, ErrNotFound) {
					err = nil
				}
			} else {
				ver++
				if err = c.Put(wctx, fmt.Sprint(k), selfChecking(uint64(k), ver, killValue)); err == nil {
					acked[k] = ver
					writes++
				}
			}
			if err != nil {
				if timer == nil {
					t.Fatalf("round %d: before the kill: %v", round, err)
				}
				break // killed
			}
		}
		timer.Stop()
		stop()
		cmd.Wait()
		cancel()
		c.Close()
	}
	t.Logf("%s: 20 rounds: %d values served after a SIGKILL, %d corrupt, %d stale", tr, served, corrupt, stale)
	if served == 0 {
		t.Error("no value survived any kill: the disk tier kept nothing")
	}
}

// A value only on disk whose record is damaged is a miss, counted, and
// never served; the server keeps serving.
func TestDiskTierCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	opts := ServerOptions{Engine: xfer.Config{MemoryMB: 8}, DiskDir: dir, DiskSize: 32 << 20}
	s := startServer(t, opts)
	c := dial(t, s.addr, xfer.PolicyTCP)
	ctx := ctxT(t)
	const n, size = 8, 256 << 10
	for i := range n {
		if err := c.Put(ctx, fmt.Sprint(i), selfChecking(uint64(i), 1, size)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	s.stop()
	// Damage one byte of every value on disk (not the headers).
	f, err := os.OpenFile(filepath.Join(dir, disktier.FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for off := int64(2 * disktier.Block); off < 32<<20; off += disktier.Block {
		hdr := make([]byte, disktier.Block)
		if _, err := f.ReadAt(hdr, off); err != nil {
			break
		}
		if h, _, err := disktier.DecodeHeader(hdr); err == nil && !h.Tomb && h.N > 0 {
			at, b := off+disktier.Block+int64(h.N)/2, []byte{0}
			f.ReadAt(b, at)
			f.WriteAt([]byte{^b[0]}, at)
		}
	}
	f.Close()
	s = startServer(t, opts)
	c = dial(t, s.addr, xfer.PolicyTCP)
	for i := range n {
		if v, err := c.Get(ctx, fmt.Sprint(i)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key %d, damaged on disk: %d bytes, %v; want not found", i, len(v), err)
		}
	}
	if st := s.Snapshot(); st.Disk.Corrupt != n || st.Disk.DroppedRead != n || st.Keys != 0 {
		t.Fatalf("keys %d, disk %+v: want %d corrupt, dropped", st.Keys, *st.Disk, n)
	}
	if err := c.Put(ctx, "after", []byte("still serving")); err != nil {
		t.Fatal(err)
	}
}

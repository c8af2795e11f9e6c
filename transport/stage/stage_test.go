package stage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
)

func TestNeededHost(t *testing.T) {
	r, err := mem.NewRegion(mem.RegionOptions{Size: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	op := &transport.Op{Region: mem.NewHandle(r, 1, 0, mem.AccessReadWrite), Local: r.Bytes()}
	if Needed(mem.KindSet(mem.KindHost), nil, op) {
		t.Fatal("host memory staged")
	}
}

// TestRemote stages a peer's READ and WRITE of a GPU range through the
// staging memory, and then, once the Stager is closed, through memory of
// their own.
func TestRemote(t *testing.T) {
	testutil.RequireCUDA(t)
	var devs mem.DeviceSet
	defer func() {
		if err := devs.Close(); err != nil {
			t.Error(err)
		}
	}()
	d, err := devs.Get(mem.CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := mem.NewHandle(r, 1, 0, mem.AccessReadWrite)
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := d.Copy(r.Addr(), addrOf(want), len(want)); err != nil {
		t.Fatal(err)
	}
	registered := 0
	s := New(Config{Devices: &devs, Log: slog.New(slog.DiscardHandler), Context: context.Background(),
		Register: func(mr *mem.Region) (*mem.Handle, func() error, error) {
			registered++
			return mem.NewHandle(mr, 2, 0, mem.AccessReadWrite), mr.Close, nil
		}})
	check := func(pooled bool) {
		t.Helper()
		buf, st, err := s.Remote(h, 4096, 8192, true)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, want[4096:4096+8192]) {
			t.Fatal("a READ's staged copy does not hold the GPU's bytes")
		}
		if got := s.Stats(); pooled && (got.Bytes != Size || got.UsedBytes < 8192) {
			t.Fatalf("Stats with a staged copy in use: %+v", got)
		}
		copy(buf, bytes.Repeat([]byte{'x'}, len(buf)))
		copy(want[4096:], buf)
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
		st.Release()
		got := make([]byte, len(want))
		if err := d.Copy(addrOf(got), r.Addr(), len(got)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("a WRITE's staged copy did not reach the GPU")
		}
	}
	check(true)
	if got := s.Stats(); got.UsedBytes != 0 || registered != 1 {
		t.Fatalf("after Release: %+v, staging registered %d times", got, registered)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(false)
	unused := New(Config{Devices: &devs})
	if err := unused.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := unused.staging(mem.CUDA(0)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("staging memory of a Stager closed before its first use: %v", err)
	}
}

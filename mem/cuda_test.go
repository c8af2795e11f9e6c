package mem

import (
	"bytes"
	"errors"
	"testing"

	"github.com/xferio/xfer/internal/testutil"
)

// TestCUDARow runs the table's cuda row through what the engine and the
// transports ask of it: open a device, allocate, copy both ways on the
// device and on a stream, pin host memory, locate and wrap a pointer, and
// export an IPC handle.
func TestCUDARow(t *testing.T) {
	testutil.RequireCUDA(t)
	info, _ := KindCUDA.Info()
	if err := info.Driver.Available(); err != nil {
		t.Fatal(err)
	}
	var set DeviceSet
	defer func() {
		if err := set.Close(); err != nil {
			t.Error(err)
		}
	}()
	d, err := set.Get(CUDA(0))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := set.Get(CUDA(0)); again != d || d.Location() != CUDA(0) {
		t.Fatalf("device opened twice, or misplaced: %v", d.Location())
	}
	if got := set.Opened(); len(got) != 1 || got[0] != CUDA(0) {
		t.Fatalf("Opened = %v", got)
	}
	r, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Location() != CUDA(0) {
		t.Fatalf("allocated in %v", r.Location())
	}
	host, err := NewRegion(RegionOptions{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := d.Pin(host.Bytes()); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("kinds"), 1000)
	copy(host.Bytes(), want)
	if err := d.Copy(r.Addr(), host.Addr(), len(want)); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(want))
	st, err := d.Stream()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CopyAsync(addrOf(back), r.Addr(), len(back)); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	st.Release()
	if !bytes.Equal(back, want) {
		t.Fatal("the bytes copied to the device and back differ")
	}
	if err := d.Unpin(host.Bytes()); err != nil {
		t.Fatal(err)
	}

	if l := Locate(r.Addr() + 4096); l != CUDA(0) {
		t.Fatalf("Locate(device memory) = %v", l)
	}
	if l := Locate(host.Addr()); l != Host {
		t.Fatalf("Locate(host memory) = %v", l)
	}
	w, err := WrapDeviceRegion(r.Addr()+4096, 4096)
	if err != nil || w.Location() != CUDA(0) {
		t.Fatalf("WrapDeviceRegion: %v, %v", w, err)
	}
	w.Close()
	if _, err := WrapDeviceRegion(host.Addr(), 4096); !errors.Is(err, ErrNotDevice) {
		t.Fatalf("WrapDeviceRegion(host memory): %v, want ErrNotDevice", err)
	}

	x, ok := d.(IPCExporter)
	if !ok {
		t.Fatal("a CUDA device exports no IPC handles")
	}
	if h, base, err := x.IPCHandle(r.Addr() + 4096); err != nil || base != r.Addr() || h == (IPCHandle{}) {
		t.Fatalf("IPCHandle: %x, base %#x (allocation at %#x), %v", h[:8], base, r.Addr(), err)
	}
	if _, ok := d.(DMABufExporter); !ok {
		t.Fatal("a CUDA device exports no DMA-BUFs")
	}
}

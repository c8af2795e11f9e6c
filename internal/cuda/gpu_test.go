package cuda

// The tests in this file need a GPU and the NVIDIA driver. They skip
// elsewhere, and fail there when XFER_REQUIRE_CUDA=1.

import (
	"bytes"
	"errors"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/xferio/xfer/internal/sys"
)

// retain0 retains device 0 for the test and closes it after.
func retain0(t *testing.T) *Context {
	t.Helper()
	requireCUDA(t)
	c, err := Retain(0)
	if err != nil {
		t.Fatalf("Retain(0): %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Context.Close: %v", err)
		}
	})
	return c
}

// alloc allocates n bytes on c for the test and frees them after.
func alloc(t *testing.T, c *Context, n int) uintptr {
	t.Helper()
	p, err := c.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	t.Cleanup(func() {
		if err := c.Free(p); err != nil {
			t.Errorf("Free(%#x): %v", p, err)
		}
	})
	return p
}

// hostMem maps n bytes of anonymous memory for the test and unmaps it after.
func hostMem(t *testing.T, n int) ([]byte, uintptr) {
	t.Helper()
	b, err := sys.MmapAnon(n, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Munmap(b); err != nil {
			t.Error(err)
		}
	})
	return b, uintptr(unsafe.Pointer(&b[0]))
}

var pciBusID = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

func TestDevices(t *testing.T) {
	requireCUDA(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	n, err := DeviceCount()
	if err != nil || n != len(devs) || n == 0 {
		t.Fatalf("DeviceCount() = %d, %v; Devices() has %d", n, err, len(devs))
	}
	for i, d := range devs {
		t.Logf("%+v", d)
		if d.Ordinal != i || d.Name == "" || d.TotalMem < 1<<30 || !pciBusID.MatchString(d.PCIBusID) ||
			d.ComputeMajor < 3 || d.ComputeMinor < 0 || !d.UnifiedAddressing {
			t.Errorf("device %d: implausible %+v", i, d)
		}
	}
	_, err = Retain(n)
	if err == nil || !regexpMust(`cuda:\d+: no such CUDA device: this process sees \d+ devices?`).MatchString(err.Error()) {
		t.Errorf("Retain(%d) = %v, want an error naming the devices there are", n, err)
	}
	if _, err := Retain(-1); err == nil {
		t.Error("Retain(-1) succeeded")
	}
}

func regexpMust(s string) *regexp.Regexp { return regexp.MustCompile(s) }

func TestCopyRoundTrip(t *testing.T) {
	c := retain0(t)
	if c.Ordinal() != 0 {
		t.Errorf("Ordinal() = %d", c.Ordinal())
	}
	for _, n := range []int{1, 64 << 20} {
		d := alloc(t, c, n)
		d2 := alloc(t, c, n)
		h, hp := hostMem(t, n)
		h2, hp2 := hostMem(t, n)

		if err := c.Memset(d, 0xa5, n); err != nil {
			t.Fatal(err)
		}
		if err := c.Copy(hp, d, n); err != nil { // device to host
			t.Fatal(err)
		}
		if got := bytes.Count(h, []byte{0xa5}); got != n {
			t.Fatalf("%d bytes: after Memset(0xa5) and a copy to the host, only %d bytes are 0xa5", n, got)
		}
		for i := range h {
			h[i] = byte(i*7 + i>>12)
		}
		if err := c.Copy(d, hp, n); err != nil { // host to device
			t.Fatal(err)
		}
		if err := c.Copy(d2, d, n); err != nil { // device to device
			t.Fatal(err)
		}
		if err := c.Copy(hp2, d2, n); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h, h2) {
			t.Fatalf("%d bytes: host -> device -> device -> host changed the data", n)
		}
	}
	if _, err := c.Alloc(-1); err == nil {
		t.Error("Alloc(-1) succeeded")
	}
	var e *Error
	if _, err := c.Alloc(1 << 60); !errors.As(err, &e) || e.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("Alloc(1 EiB) = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	} else {
		t.Logf("Alloc(1 EiB) = %v", err)
	}
}

func TestStreamEvent(t *testing.T) {
	c := retain0(t)
	const n = 64 << 20
	d := alloc(t, c, n)
	h, hp := hostMem(t, n)
	if err := c.HostRegister(h); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.HostUnregister(h); err != nil {
			t.Error(err)
		}
	}()
	if err := c.Memset(d, 0x3c, n); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if done, err := e.Done(); !done || err != nil {
		t.Errorf("Done() of an unrecorded event = %v, %v", done, err)
	}

	if err := s.CopyAsync(hp, d, n); err != nil {
		t.Fatal(err)
	}
	if err := e.Record(s); err != nil {
		t.Fatal(err)
	}
	polls := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := e.Done()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		polls++
		if time.Now().After(deadline) {
			t.Fatal("the event is not done after 10s")
		}
		time.Sleep(10 * time.Microsecond)
	}
	t.Logf("the 64 MiB copy was done after %d polls", polls)
	if bytes.Count(h, []byte{0x3c}) != n {
		t.Fatal("the async copy did not deliver the data")
	}

	// The other way, waited for with Sync.
	for i := range h {
		h[i] = byte(i)
	}
	if err := s.CopyAsync(d, hp, n); err != nil {
		t.Fatal(err)
	}
	if err := e.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	clear(h)
	if err := c.Copy(hp, d, n); err != nil {
		t.Fatal(err)
	}
	for i := range h {
		if h[i] != byte(i) {
			t.Fatalf("byte %d is %#x after the round trip", i, h[i])
		}
	}
}

func TestPointerAttributes(t *testing.T) {
	c := retain0(t)
	const n = 4 << 20
	d := alloc(t, c, n)
	pi, err := PointerAttributes(d + 100)
	if err != nil {
		t.Fatal(err)
	}
	if pi != (PointerInfo{Type: MemoryDevice, Device: 0, Base: d, Size: n}) {
		t.Errorf("PointerAttributes(device+100) = %+v, want device 0, base %#x, size %d", pi, d, n)
	}

	h, hp := hostMem(t, n)
	pi, err = PointerAttributes(hp)
	if err != nil || pi.Type != MemoryUnregistered || pi.Device != -1 {
		t.Errorf("PointerAttributes(mmap'd host) = %+v, %v; want unregistered", pi, err)
	}
	if err := c.HostRegister(h); err != nil {
		t.Fatal(err)
	}
	pi, err = PointerAttributes(hp + 8)
	if err != nil || pi.Type != MemoryHost {
		t.Errorf("PointerAttributes(registered host) = %+v, %v; want host", pi, err)
	}
	t.Logf("registered host memory at %#x: %+v", hp, pi)
	if err := c.HostRegister(h); err == nil {
		t.Error("registering the same memory twice succeeded")
	} else {
		t.Logf("second HostRegister: %v", err)
	}
	if err := c.HostUnregister(h); err != nil {
		t.Fatal(err)
	}
	if pi, err := PointerAttributes(hp); err != nil || pi.Type != MemoryUnregistered {
		t.Errorf("PointerAttributes after HostUnregister = %+v, %v; want unregistered", pi, err)
	}
	if pi, err := PointerAttributes(0); err != nil || pi.Type != MemoryUnregistered {
		t.Errorf("PointerAttributes(0) = %+v, %v; want unregistered", pi, err)
	}
}

func TestAddressRangeIPC(t *testing.T) {
	c := retain0(t)
	const n = 8 << 20
	d := alloc(t, c, n)
	base, size, err := c.AddressRange(d + 12345)
	if err != nil || base != d || size != n {
		t.Errorf("AddressRange(interior) = %#x, %d, %v; want %#x, %d", base, size, err, d, n)
	}
	if _, _, err := c.AddressRange(0x1000); err == nil {
		t.Error("AddressRange(0x1000) succeeded")
	}

	h, err := c.IPCHandle(d)
	if err != nil {
		t.Fatal(err)
	}
	if h == (IPCHandle{}) {
		t.Error("IPCHandle is all zeros")
	}
	// CUDA refuses to open a handle in the process that made it.
	if p, err := c.OpenIPC(h); err == nil {
		t.Logf("OpenIPC of our own handle succeeded (%#x)", p)
		if err := c.CloseIPC(p); err != nil {
			t.Error(err)
		}
	} else {
		t.Logf("OpenIPC of our own handle: %v", err)
	}
	if _, err := c.OpenIPC(IPCHandle{}); err == nil {
		t.Error("OpenIPC of a zero handle succeeded")
	}
}

func TestDMABuf(t *testing.T) {
	c := retain0(t)
	devs, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2 << 20
	d := alloc(t, c, n)
	if d%uintptr(sys.PageSize()) != 0 {
		t.Skipf("the allocation at %#x is not page aligned", d)
	}
	fd, err := c.DMABufFD(d, n)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("DMABufFD = %v, want an *Error", err)
		}
		if devs[0].DMABuf && e.Code != codeNotSupported {
			t.Errorf("DMABufFD on a device with DMA_BUF_SUPPORTED: %v", err)
		}
		t.Logf("DMABufFD (device DMABuf=%v): %v", devs[0].DMABuf, err)
		return
	}
	if fd < 0 {
		t.Fatalf("DMABufFD = %d", fd)
	}
	t.Logf("DMABufFD = fd %d (device DMABuf=%v)", fd, devs[0].DMABuf)
	if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil {
		t.Logf("fd %d is %s", fd, target)
	}
	if err := sys.Close(fd); err != nil {
		t.Error(err)
	}
}

func TestCloseAndUseAfterClose(t *testing.T) {
	requireCUDA(t)
	c, err := Retain(0)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err == nil {
		t.Fatal("Context.Close with an open stream and event succeeded")
	} else {
		t.Logf("Context.Close with children: %v", err)
	}
	if err := c.Memset(d, 0, 4096); err != nil {
		t.Fatalf("the Context is not usable after a refused Close: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := e.Close(); err != nil {
			t.Errorf("Event.Close #%d: %v", i+1, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Stream.Close #%d: %v", i+1, err)
		}
	}
	closed := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close = %v, want net.ErrClosed", what, err)
		}
	}
	closed("Stream.CopyAsync", s.CopyAsync(d, d, 1))
	closed("Stream.Sync", s.Sync())
	closed("Event.Record", e.Record(s))
	closed("Event.Sync", e.Sync())
	_, err = e.Done()
	closed("Event.Done", err)

	if err := c.Free(d); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := c.Close(); err != nil {
			t.Errorf("Context.Close #%d: %v", i+1, err)
		}
	}
	_, err = c.Alloc(1)
	closed("Alloc", err)
	closed("Free", c.Free(d))
	closed("Memset", c.Memset(d, 0, 1))
	closed("Copy", c.Copy(d, d, 1))
	_, _, err = c.AddressRange(d)
	closed("AddressRange", err)
	_, err = c.NewStream()
	closed("NewStream", err)
	_, err = c.NewEvent()
	closed("NewEvent", err)
	_, err = c.IPCHandle(d)
	closed("IPCHandle", err)
	_, err = c.OpenIPC(IPCHandle{})
	closed("OpenIPC", err)
	closed("CloseIPC", c.CloseIPC(d))
	closed("HostRegister", c.HostRegister(make([]byte, 1)))
	closed("HostUnregister", c.HostUnregister(make([]byte, 1)))
	_, err = c.DMABufFD(d, 4096)
	closed("DMABufFD", err)
	if c.Ordinal() != 0 {
		t.Errorf("Ordinal() after Close = %d", c.Ordinal())
	}
}

// TestConcurrent uses one Context from many goroutines at once, each with
// its own memory and stream, while another retains and releases the same
// primary context.
func TestConcurrent(t *testing.T) {
	c := retain0(t)
	const n = 1 << 20
	var wg sync.WaitGroup
	for g := range 8 {
		h, hp := hostMem(t, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := c.Alloc(n)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Free(d)
			s, err := c.NewStream()
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			for i := range 20 {
				v := byte(g*31 + i)
				if err := c.Memset(d, v, n); err != nil {
					t.Error(err)
					return
				}
				if err := s.CopyAsync(hp, d, n); err != nil {
					t.Error(err)
					return
				}
				if err := s.Sync(); err != nil {
					t.Error(err)
					return
				}
				if h[0] != v || h[n-1] != v {
					t.Errorf("goroutine %d, round %d: got %#x..%#x, want %#x", g, i, h[0], h[n-1], v)
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			c2, err := Retain(0)
			if err != nil {
				t.Error(err)
				return
			}
			if err := c2.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
}

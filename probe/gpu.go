package probe

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xferio/xfer/internal/cuda"
)

// ErrCUDANotAvailable means there is no usable CUDA here: no driver, no
// GPU, a driver too old, or a build without cgo. It is the same value as
// xfer.ErrCUDANotAvailable.
var ErrCUDANotAvailable = cuda.ErrNotAvailable

// GPU describes one CUDA device, as the driver and the PCI bus tell it.
type GPU struct {
	Ordinal     int    // cuda:N
	Name        string // "NVIDIA H200"
	MemoryBytes uint64
	PCIBusID    string // as the driver writes it: "00000000:00:06.0"
	Compute     string // the compute capability, "9.0"
	DMABuf      bool   // the driver exports its memory as DMA-BUF (GPUDirect RDMA without nvidia-peermem)
	GPUDirect   bool   // the driver reports GPUDirect RDMA support
	BAR1Bytes   uint64 // the BAR1 aperture through which a NIC reaches GPU memory; 0 when unknown
	DriverMajor int
	DriverMinor int
}

// CUDA reports whether the CUDA driver (libcuda.so.1) loads and sees a
// GPU. Otherwise the error matches ErrCUDANotAvailable and says why and
// what to do. The answer is the driver's, cached by it.
func CUDA() error { return cuda.Load() }

// GPUs lists the CUDA devices. Without CUDA the error is CUDA's.
func GPUs() ([]GPU, error) {
	devs, err := cuda.Devices()
	if err != nil {
		return nil, err
	}
	major, minor, _ := cuda.DriverVersion()
	out := make([]GPU, 0, len(devs))
	for _, d := range devs {
		out = append(out, GPU{Ordinal: d.Ordinal, Name: d.Name, MemoryBytes: d.TotalMem, PCIBusID: d.PCIBusID,
			Compute: fmt.Sprintf("%d.%d", d.ComputeMajor, d.ComputeMinor), DMABuf: d.DMABuf, GPUDirect: d.GPUDirectRDMA,
			BAR1Bytes: bar1Size("/sys/bus/pci/devices", d.PCIBusID), DriverMajor: major, DriverMinor: minor})
	}
	return out, nil
}

// bar1Size reads the size of an NVIDIA GPU's BAR1 (the aperture through
// which a NIC reaches GPU memory) from sysfs, or 0. The resource file has a
// line per BAR (start, end and flags in hex); NVIDIA's BAR1 is the device's
// second memory BAR. That is line 1 where BAR0 is a 32-bit BAR, and line 2
// where BAR0 is 64-bit and so also takes slot 1, which then reads as empty
// (seen on an H200 in a virtual machine: BAR0 16 MiB, BAR1 256 GiB).
func bar1Size(root, busID string) uint64 {
	dom, rest, ok := strings.Cut(strings.ToLower(busID), ":")
	d, err := strconv.ParseUint(dom, 16, 32)
	if !ok || err != nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(root, fmt.Sprintf("%04x:%s", d, rest), "resource"))
	if err != nil {
		return 0
	}
	const ioResourceMem = 0x200 // the kernel's IORESOURCE_MEM flag
	seen := 0
	for i, line := range strings.Split(string(b), "\n") {
		if i >= 6 { // BARs 0-5; the expansion ROM and the rest follow
			break
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		end, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		flags, err3 := strconv.ParseUint(strings.TrimPrefix(f[2], "0x"), 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end == 0 || end < start || flags&ioResourceMem == 0 {
			continue
		}
		if seen++; seen == 2 {
			return end - start + 1
		}
	}
	return 0
}

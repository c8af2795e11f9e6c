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

// bar1Size reads the size of a PCI device's BAR1 from sysfs (the second
// line of its resource file: start, end and flags in hex), or 0.
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
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 {
		return 0
	}
	f := strings.Fields(lines[1])
	if len(f) < 2 {
		return 0
	}
	start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
	end, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
	if err1 != nil || err2 != nil || end < start || end == 0 {
		return 0
	}
	return end - start + 1
}

package probe

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/xferio/xfer/bytesize"
)

// PCI vendor ids of GPU makers, and the display controller class.
const (
	pciVendorNVIDIA = "0x10de"
	pciVendorAMD    = "0x1002"
	pciClassDisplay = "0x03"
)

// checkGPU checks GPUDirect RDMA where a GPU is present: nvidia-peermem for
// NVIDIA's driver (or DMA-BUF, which NVIDIA's open kernel modules export),
// DMA-BUF through amdgpu for AMD.
// It returns how many NVIDIA GPUs the PCI bus shows.
func checkGPU(r *Report, h hostPaths, loaded map[string]bool) int {
	var nvidia, amd int
	entries, _ := os.ReadDir(h.pciDevices)
	for _, e := range entries {
		class, err1 := os.ReadFile(filepath.Join(h.pciDevices, e.Name(), "class"))
		vendor, err2 := os.ReadFile(filepath.Join(h.pciDevices, e.Name(), "vendor"))
		if err1 != nil || err2 != nil || !strings.HasPrefix(strings.TrimSpace(string(class)), pciClassDisplay) {
			continue
		}
		switch strings.TrimSpace(string(vendor)) {
		case pciVendorNVIDIA:
			nvidia++
		case pciVendorAMD:
			amd++
		}
	}
	if nvidia == 0 && amd == 0 {
		r.skip("gpu", "GPUDirect RDMA: no GPU on this host")
		return 0
	}
	if nvidia > 0 {
		switch {
		case loaded["nvidia_peermem"]:
			r.ok("gpu", "%d NVIDIA GPU(s): nvidia-peermem is loaded (GPUDirect RDMA)", nvidia)
		case !loaded["nvidia"]:
			r.fail("gpu", "install the NVIDIA driver after rdma-core/MLNX_OFED, then: modprobe nvidia-peermem",
				"%d NVIDIA GPU(s) but the nvidia driver is not loaded", nvidia)
		case openNVIDIAModules():
			r.ok("gpu", "%d NVIDIA GPU(s): the open kernel modules export GPU memory as DMA-BUF (nvidia-peermem is not loaded, nor needed for DMA-BUF)", nvidia)
		default:
			r.fail("gpu", "modprobe nvidia-peermem && echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf\n"+
				"(if it will not load: reinstall the GPU driver after rdma-core/MLNX_OFED so that it is built against their peer memory API)",
				"%d NVIDIA GPU(s), but nvidia-peermem is not loaded and the driver is not the open kernel module (no DMA-BUF)", nvidia)
		}
	}
	if amd > 0 {
		if loaded["amdgpu"] {
			r.ok("gpu", "%d AMD GPU(s): amdgpu exports GPU memory as DMA-BUF", amd)
		} else {
			r.fail("gpu", "modprobe amdgpu", "%d AMD GPU(s) but amdgpu is not loaded (no DMA-BUF)", amd)
		}
	}
	return nvidia
}

// checkCUDA checks that the CUDA driver loads and lists each GPU as GPU
// memory will use it. Without CUDA it fails where the PCI bus shows NVIDIA
// GPUs, and is skipped elsewhere.
func checkCUDA(r *Report, nvidia int) {
	gpus, err := GPUs()
	if err != nil {
		if nvidia > 0 {
			r.fail("cuda", "install the NVIDIA driver's user-space libraries (libcuda.so.1); in a container, run it with --gpus all",
				"%d NVIDIA GPU(s) on the PCI bus, but GPU memory cannot be used: %v", nvidia, err)
			return
		}
		r.skip("cuda", "GPU memory: %v", err)
		return
	}
	for _, g := range gpus {
		dmabuf := "no DMA-BUF (GPUDirect RDMA needs nvidia-peermem)"
		if g.DMABuf {
			dmabuf = "DMA-BUF"
		}
		bar1 := "BAR1 unknown"
		if g.BAR1Bytes > 0 {
			bar1 = "BAR1 " + bytesize.Human(int64(g.BAR1Bytes))
		}
		r.ok("cuda", "cuda:%d %s: %s, compute %s, %s, %s, driver %d.%d", g.Ordinal, g.Name,
			bytesize.Human(int64(g.MemoryBytes)), g.Compute, dmabuf, bar1, g.DriverMajor, g.DriverMinor)
	}
}

// openNVIDIAModules reports whether NVIDIA's driver is its open kernel
// module flavour, which supports DMA-BUF.
func openNVIDIAModules() bool {
	v, err := os.ReadFile("/proc/driver/nvidia/version")
	return err == nil && strings.Contains(string(v), "Open Kernel Module")
}

package cuda

import "fmt"

// DeviceInfo describes one CUDA device.
type DeviceInfo struct {
	// Ordinal is the device's number in this process ("cuda:N").
	Ordinal int
	// Name is the product name: "NVIDIA H100 80GB HBM3".
	Name string
	// TotalMem is the device memory in bytes.
	TotalMem uint64
	// PCIBusID is the device's PCI address, "0000:65:00.0" (the driver's
	// case), to match against the NIC's for GPUDirect.
	PCIBusID string
	// ComputeMajor and ComputeMinor are the compute capability (9.0 for
	// an H100).
	ComputeMajor, ComputeMinor int
	// UnifiedAddressing: device and host share one virtual address space,
	// so one pointer value names one place (needed by Copy and PointerAttributes).
	UnifiedAddressing bool
	// DMABuf: the device can export its memory as a DMA-BUF
	// (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED), for Context.DMABufFD. False
	// with drivers older than 11.7.
	DMABuf bool
	// GPUDirectRDMA: the device supports GPUDirect RDMA through
	// nvidia-peermem (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED).
	// False with drivers older than 11.3.
	GPUDirectRDMA bool
}

// MemoryType says where memory is, as the driver sees a pointer.
type MemoryType int

// The memory types; all but MemoryUnregistered are CUmemorytype values.
const (
	// MemoryUnregistered is host memory that CUDA does not know: plain
	// malloc'd or mmap'd memory that has not been registered.
	MemoryUnregistered MemoryType = 0
	// MemoryHost is host memory that CUDA allocated or registered (pinned).
	MemoryHost MemoryType = 1
	// MemoryDevice is device memory.
	MemoryDevice MemoryType = 2
	// MemoryArray is a CUDA array.
	MemoryArray MemoryType = 3
	// MemoryUnified is managed memory (cuMemAllocManaged), which the
	// driver migrates between host and device.
	MemoryUnified MemoryType = 4
)

// String returns "host", "device", "array", "unified" or "unregistered".
func (t MemoryType) String() string {
	switch t {
	case MemoryUnregistered:
		return "unregistered"
	case MemoryHost:
		return "host"
	case MemoryDevice:
		return "device"
	case MemoryArray:
		return "array"
	case MemoryUnified:
		return "unified"
	}
	return fmt.Sprintf("MemoryType(%d)", int(t))
}

// PointerInfo is what the driver knows about a pointer.
type PointerInfo struct {
	// Type says where the memory is.
	Type MemoryType
	// Device is the ordinal of the device the memory was allocated or
	// registered on, or -1 for unregistered memory.
	Device int
	// Base and Size are the allocation (or registered range) that
	// contains the pointer; zero for unregistered memory.
	Base uintptr
	Size uint64
}

// IPCHandle names a device allocation to another process on the same host
// (cuIpcGetMemHandle); it is plain bytes and may be sent over any channel.
type IPCHandle [64]byte

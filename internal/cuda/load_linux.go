//go:build cgo && linux

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// driverLib is the NVIDIA driver's soname; libCUDA is the library the
// package opens: driverLib, unless a test pointed it elsewhere.
const driverLib = "libcuda.so.1"

var libCUDA = driverLib

// HasDriver reports whether the NVIDIA driver's libcuda.so.1 loads here
// (it binds the functions into a scratch table and initialises nothing).
func HasDriver() bool { return tryLoad(driverLib) == nil }

// realDriverLoaded reports whether Load has initialised the NVIDIA driver
// (not a stand-in) in this process.
func realDriverLoaded() bool { return driverLoaded.Load() && libCUDA == driverLib }

// SetLibrary makes Load open path instead of the driver: for tests that run
// the GPU paths against a stand-in driver (internal/testutil.UseFakeCUDA)
// on machines without a GPU. It must be called before the first Load.
func SetLibrary(path string) { libCUDA = path }

// minDriverVersion is the oldest driver the package supports, as
// cuDriverGetVersion reports it: CUDA 11.0 added cuDevicePrimaryCtxRelease_v2
// and cuIpcOpenMemHandle_v2.
const minDriverVersion = 11000

var (
	loadOnce      sync.Once
	loadErr       error
	driverVersion int // cuDriverGetVersion, once Load succeeded
	// driverLoaded is set once Load has initialised the driver in this
	// process.
	driverLoaded atomic.Bool
)

// Load opens libcuda.so.1, binds the driver functions the package uses,
// initialises the driver (cuInit) and reads its version. It does the work
// once and caches the result; every other function calls it. When CUDA
// cannot be used it returns an [*UnavailableError], which matches
// [ErrNotAvailable] and says why and what to do.
func Load() error {
	loadOnce.Do(func() { loadErr = load(libCUDA) })
	return loadErr
}

func load(lib string) error {
	v, err := loadLib(lib, &C.xcu)
	if err != nil {
		return err
	}
	if rc := C.xcu_init(); rc != C.CUDA_SUCCESS {
		return initError(newError(rc, "cuInit"))
	}
	driverVersion = v
	driverLoaded.Store(true)
	return nil
}

// loadLib opens lib and binds the table t, and returns the driver version.
func loadLib(lib string, t *C.struct_xcu_fns) (int, error) {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	var msg [512]C.char
	var v C.int
	switch C.xcu_load(clib, t, minDriverVersion, &v, &msg[0], C.size_t(len(msg))) {
	case C.XCU_LOAD_OK:
		return int(v), nil
	case C.XCU_LOAD_DLOPEN:
		detail := C.GoString(&msg[0])
		reason := "cannot load " + lib + ": " + detail
		if strings.Contains(detail, "No such file") {
			reason = lib + " not found: " + detail
		}
		return 0, &UnavailableError{Reason: reason, Fix: fixDriver}
	case C.XCU_LOAD_OLD:
		return 0, &UnavailableError{
			Reason: fmt.Sprintf("driver %s is older than %s, the oldest this package supports",
				versionString(int(v)), versionString(minDriverVersion)),
			Fix: "update the NVIDIA driver to one that supports CUDA " + versionString(minDriverVersion) +
				" or newer (R450 or newer)",
		}
	default:
		reason := fmt.Sprintf("%s has no symbol %s", lib, C.GoString(&msg[0]))
		if v > 0 {
			reason += fmt.Sprintf(" (driver %s)", versionString(int(v)))
		}
		return 0, &UnavailableError{Reason: reason, Fix: "update the NVIDIA driver; " + fixDriver}
	}
}

// initError turns cuInit's failure into the reason CUDA is not available.
func initError(e *Error) error {
	u := &UnavailableError{Reason: e.Error(), Err: e,
		Fix: "check `nvidia-smi` and the kernel log (dmesg) for the driver's complaint"}
	switch e.Code {
	case codeNoDevice:
		u.Reason = "no CUDA device"
		u.Fix = "check that `nvidia-smi` lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it; " +
			"in a container, run with `--gpus all` (docker) or request nvidia.com/gpu (Kubernetes)"
	case codeStubLibrary:
		u.Reason = libCUDA + " is the CUDA toolkit's stub library, not the driver's"
		u.Fix = "install the NVIDIA driver, and take the toolkit's lib64/stubs directory out of LD_LIBRARY_PATH"
	case codeSystemDriverMismatch:
		u.Reason = libCUDA + " and the nvidia kernel module are from different driver versions"
		u.Fix = "after a driver upgrade, reboot (or reload the nvidia kernel modules); " +
			"in a container, do not install a driver in the image"
	case codeCompatNotSupportedDev:
		u.Reason = "the CUDA forward-compatibility driver in use does not support this GPU"
		u.Fix = "take the cuda-compat libraries out of LD_LIBRARY_PATH, or upgrade the NVIDIA driver"
	}
	return u
}

// versionString formats a cuDriverGetVersion value: 12040 is "12.4".
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// tryLoad loads lib as libcuda into a scratch table, leaving the package's
// state alone, and does not initialise it; for tests.
func tryLoad(lib string) error {
	var t C.struct_xcu_fns
	_, err := loadLib(lib, &t)
	return err
}

// newError describes the failed driver call op.
func newError(rc C.CUresult, op string) *Error {
	e := &Error{Op: op, Code: int(rc)}
	var s *C.char
	if C.xcu_error_name(rc, &s) == C.CUDA_SUCCESS && s != nil {
		e.Name = C.GoString(s)
	}
	s = nil
	if C.xcu_error_string(rc, &s) == C.CUDA_SUCCESS && s != nil {
		e.Msg = C.GoString(s)
	}
	return e
}

// DriverVersion returns the version of the CUDA driver API that the
// installed driver provides (cuDriverGetVersion): 12, 4 for CUDA 12.4.
func DriverVersion() (major, minor int, err error) {
	if err := Load(); err != nil {
		return 0, 0, err
	}
	return driverVersion / 1000, driverVersion % 1000 / 10, nil
}

// DeviceCount returns the number of CUDA devices this process can see.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	if rc := C.xcu_device_count(&n); rc != C.CUDA_SUCCESS {
		return 0, newError(rc, "cuDeviceGetCount")
	}
	return int(n), nil
}

// Devices describes every CUDA device this process can see, in ordinal
// order.
func Devices() ([]DeviceInfo, error) {
	n, err := DeviceCount()
	if err != nil {
		return nil, err
	}
	devs := make([]DeviceInfo, 0, n)
	for i := range n {
		var d C.struct_xcu_device_info
		if rc := C.xcu_device_info(C.int(i), &d); rc != C.CUDA_SUCCESS {
			return nil, newError(rc, C.GoString(d.op)+" "+deviceName(i))
		}
		devs = append(devs, DeviceInfo{
			Ordinal:           i,
			Name:              C.GoString(&d.name[0]),
			TotalMem:          uint64(d.total_mem),
			PCIBusID:          C.GoString(&d.pci_bus_id[0]),
			ComputeMajor:      int(d.cc_major),
			ComputeMinor:      int(d.cc_minor),
			UnifiedAddressing: d.unified_addressing != 0,
			DMABuf:            d.dma_buf != 0,
			GPUDirectRDMA:     d.gpudirect_rdma != 0,
		})
	}
	return devs, nil
}

// PointerAttributes asks the driver what p points to
// (cuPointerGetAttribute: memory type, device, and the allocation that
// contains p). It needs no Context. Host memory that CUDA does not know
// (the driver answers CUDA_ERROR_INVALID_VALUE) is reported as
// MemoryUnregistered with a nil error. Managed memory is MemoryUnified.
func PointerAttributes(p uintptr) (PointerInfo, error) {
	if err := Load(); err != nil {
		return PointerInfo{Device: -1}, err
	}
	var pi C.struct_xcu_pointer_info
	switch rc := C.xcu_pointer_info(C.CUdeviceptr(p), &pi); rc {
	case C.CUDA_SUCCESS:
	case C.CUDA_ERROR_INVALID_VALUE:
		if pi._type == 0 { // the first query, the memory type, failed
			return PointerInfo{Type: MemoryUnregistered, Device: -1}, nil
		}
		fallthrough
	default:
		return PointerInfo{Device: -1}, newError(rc, fmt.Sprintf("cuPointerGetAttribute %#x", p))
	}
	info := PointerInfo{
		Type:   MemoryType(pi._type),
		Device: int(pi.device),
		Base:   uintptr(pi.base),
		Size:   uint64(pi.size),
	}
	if pi.managed != 0 {
		info.Type = MemoryUnified
	}
	return info, nil
}

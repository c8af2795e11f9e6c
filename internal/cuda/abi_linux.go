//go:build cgo && linux

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/xferio/xfer/internal/cabi"
)

// abiTable returns abi_table.h evaluated against the package's header.
func abiTable() []cabi.Item {
	var n C.int
	p := C.xcu_abi_table(&n)
	return cabi.Table(unsafe.Slice(p, int(n)), func(it C.struct_xcu_abi_item) (string, int64) {
		return C.GoString(it.expr), int64(it.value)
	})
}

// abiGoConsts lists the Go constants whose values are cuda_abi.h's. TestABI
// checks that each pair is equal.
func abiGoConsts() []cabi.Const {
	c := cabi.Equal
	return []cabi.Const{
		c("codeSuccess", codeSuccess, C.CUDA_SUCCESS),
		c("codeInvalidValue", codeInvalidValue, C.CUDA_ERROR_INVALID_VALUE),
		c("codeNotInitialized", codeNotInitialized, C.CUDA_ERROR_NOT_INITIALIZED),
		c("codeStubLibrary", codeStubLibrary, C.CUDA_ERROR_STUB_LIBRARY),
		c("codeNoDevice", codeNoDevice, C.CUDA_ERROR_NO_DEVICE),
		c("codeNotReady", codeNotReady, C.CUDA_ERROR_NOT_READY),
		c("codeNotSupported", codeNotSupported, C.CUDA_ERROR_NOT_SUPPORTED),
		c("codeSystemDriverMismatch", codeSystemDriverMismatch, C.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH),
		c("codeCompatNotSupportedDev", codeCompatNotSupportedDev, C.CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE),
		c("MemoryHost", int64(MemoryHost), C.CU_MEMORYTYPE_HOST),
		c("MemoryDevice", int64(MemoryDevice), C.CU_MEMORYTYPE_DEVICE),
		c("MemoryArray", int64(MemoryArray), C.CU_MEMORYTYPE_ARRAY),
		c("MemoryUnified", int64(MemoryUnified), C.CU_MEMORYTYPE_UNIFIED),
		c("len(IPCHandle)", int64(len(IPCHandle{})), C.CU_IPC_HANDLE_SIZE),
		c("sizeof(CUdeviceptr) vs uintptr", int64(unsafe.Sizeof(uintptr(0))), C.sizeof_CUdeviceptr),
	}
}

package cuda

import (
	"errors"
	"fmt"
	"net"
)

// ErrNotAvailable means CUDA cannot be used here: the binary was built
// without cgo or for another OS, the host has no NVIDIA driver
// (libcuda.so.1), the driver is too old, or there is no GPU. The error that
// wraps it says which and what to do. Callers that can fall back to host
// memory test for it with errors.Is.
var ErrNotAvailable = errors.New("CUDA is not available")

// CUresult values that the Go side tells apart. cuda_abi.h declares the
// same values for C, and TestABI checks that they agree.
const (
	codeSuccess               = 0
	codeInvalidValue          = 1
	codeNotInitialized        = 3
	codeStubLibrary           = 34
	codeInsufficientDriver    = 35 // the runtime API's cudaErrorInsufficientDriver; no CUresult has this value
	codeNoDevice              = 100
	codeNotReady              = 600
	codeNotSupported          = 801
	codeSystemDriverMismatch  = 803
	codeCompatNotSupportedDev = 804
)

// Error is a failed driver call.
type Error struct {
	// Op names the call and what it was for: "cuMemAlloc 1 GiB on cuda:0".
	Op string
	// Code is the CUresult the driver returned.
	Code int
	// Name is the code's name, as cuGetErrorName gives it:
	// "CUDA_ERROR_OUT_OF_MEMORY".
	Name string
	// Msg is the driver's description of the code (cuGetErrorString).
	Msg string
}

// Error returns "Op: Name: Msg".
func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("CUresult %d", e.Code)
	}
	s := e.Op + ": " + name
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is reports whether the failure means that CUDA cannot be used at all, so
// that errors.Is(err, ErrNotAvailable) holds: no device
// (CUDA_ERROR_NO_DEVICE), the driver not initialised
// (CUDA_ERROR_NOT_INITIALIZED), a stub library in place of the driver
// (CUDA_ERROR_STUB_LIBRARY), a driver that does not match its kernel module
// or the GPU (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
// CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE), or code 35, the runtime
// API's insufficient driver. CUDA_ERROR_NOT_SUPPORTED, a feature this
// device or driver lacks, does not match it.
func (e *Error) Is(target error) bool {
	return target == ErrNotAvailable && notAvailable(e.Code)
}

func notAvailable(code int) bool {
	switch code {
	case codeNoDevice, codeNotInitialized, codeStubLibrary, codeInsufficientDriver,
		codeSystemDriverMismatch, codeCompatNotSupportedDev:
		return true
	}
	return false
}

// UnavailableError is Load's failure: CUDA cannot be used in this process.
// It matches [ErrNotAvailable].
type UnavailableError struct {
	// Reason says what is missing: "libcuda.so.1 not found: ...",
	// "no CUDA device", "driver 10.2 is older than 11.0, the oldest this
	// package supports".
	Reason string
	// Fix says what to do about it, or is empty.
	Fix string
	// Err is the underlying failure (an *Error from cuInit), or nil.
	Err error
}

// Error returns "CUDA is not available: Reason", and the fix on a second
// line.
func (e *UnavailableError) Error() string {
	s := ErrNotAvailable.Error() + ": " + e.Reason
	if e.Fix != "" {
		s += "\nFix: " + e.Fix
	}
	return s
}

// Is reports whether target is ErrNotAvailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrNotAvailable }

// Unwrap returns Err.
func (e *UnavailableError) Unwrap() error { return e.Err }

// sentinel is an error value that also matches a more general one.
type sentinel struct {
	msg    string
	parent error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.parent }

// errClosed is what calls on a closed (or nil) handle return, wrapped with
// the operation. It matches net.ErrClosed.
var errClosed error = &sentinel{msg: "cuda: handle is closed", parent: net.ErrClosed}

func closedErr(op string) error { return fmt.Errorf("%s: %w", op, errClosed) }

// fixDriver says how to get the CUDA driver.
const fixDriver = "install the NVIDIA driver (it provides libcuda.so.1; `nvidia-smi` should list the GPUs); " +
	"in a container, run with the NVIDIA Container Toolkit (`docker run --gpus all`, or a nvidia.com/gpu " +
	"resource on Kubernetes) so that the driver's libraries are mounted"

// deviceName is how messages name device ordinal i.
func deviceName(i int) string { return fmt.Sprintf("cuda:%d", i) }

package cuda

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{&Error{Op: "cuMemAlloc 1 GiB on cuda:0", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"},
			"cuMemAlloc 1 GiB on cuda:0: CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{&Error{Op: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}, "cuInit: CUDA_ERROR_NO_DEVICE"},
		{&Error{Op: "cuFoo", Code: 12345}, "cuFoo: CUresult 12345"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestErrorIs(t *testing.T) {
	for code, want := range map[int]bool{
		codeNoDevice:              true,
		codeNotInitialized:        true,
		codeStubLibrary:           true,
		codeInsufficientDriver:    true,
		codeSystemDriverMismatch:  true,
		codeCompatNotSupportedDev: true,
		codeNotSupported:          false,
		codeInvalidValue:          false,
		2:                         false, // out of memory
		codeNotReady:              false,
	} {
		var err error = &Error{Op: "op", Code: code}
		if got := errors.Is(err, ErrNotAvailable); got != want {
			t.Errorf("errors.Is(Error{Code: %d}, ErrNotAvailable) = %v, want %v", code, got, want)
		}
		wrapped := fmt.Errorf("outer: %w", err)
		if got := errors.Is(wrapped, ErrNotAvailable); got != want {
			t.Errorf("errors.Is(wrapped Error{Code: %d}, ErrNotAvailable) = %v, want %v", code, got, want)
		}
		var e *Error
		if !errors.As(wrapped, &e) || e.Code != code {
			t.Errorf("errors.As(wrapped Error{Code: %d}) = %v", code, e)
		}
	}
}

func TestUnavailableError(t *testing.T) {
	inner := &Error{Op: "cuInit", Code: codeNoDevice, Name: "CUDA_ERROR_NO_DEVICE"}
	u := &UnavailableError{Reason: "no CUDA device", Fix: "run with --gpus all", Err: inner}
	if got, want := u.Error(), "CUDA is not available: no CUDA device\nFix: run with --gpus all"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(u, ErrNotAvailable) {
		t.Error("UnavailableError does not match ErrNotAvailable")
	}
	var e *Error
	if !errors.As(u, &e) || e != inner {
		t.Error("UnavailableError does not unwrap to its Err")
	}
	noFix := &UnavailableError{Reason: "why"}
	if got, want := noFix.Error(), "CUDA is not available: why"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("x: %w", noFix), ErrNotAvailable) || errors.Is(noFix, net.ErrClosed) {
		t.Error("UnavailableError without Err matches wrongly")
	}
}

func TestClosedErr(t *testing.T) {
	err := closedErr("cuMemAlloc on cuda:0")
	if !errors.Is(err, net.ErrClosed) || errors.Is(err, ErrNotAvailable) {
		t.Errorf("closedErr = %v, want it to match net.ErrClosed only", err)
	}
	if !strings.HasPrefix(err.Error(), "cuMemAlloc on cuda:0: ") {
		t.Errorf("closedErr = %q, does not name the operation", err)
	}
}

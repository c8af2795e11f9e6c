//go:build cgo

package ibv

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"sync"
	"syscall"
	"unsafe"
)

// The sonames the package opens. They are variables so that tests can
// point them elsewhere.
var libVerbs = "libibverbs.so.1"

var (
	verbsOnce sync.Once
	verbsErr  error
)

// Load opens libibverbs.so.1 and binds the functions the package uses. It
// does the work once and caches the result; every other function calls it.
// Without the library it returns a [*LibraryError] that wraps
// [ErrNotSupported] and says what to install.
func Load() error {
	verbsOnce.Do(func() { verbsErr = loadVerbs(libVerbs, &C.xibv) })
	return verbsErr
}

func loadVerbs(lib string, t *C.struct_xibv_verbs_fns) error {
	clib := C.CString(lib)
	defer C.free(unsafe.Pointer(clib))
	var msg [512]C.char
	if C.xibv_load_verbs(clib, t, &msg[0], C.size_t(len(msg))) != 0 {
		return &LibraryError{Library: lib, Detail: C.GoString(&msg[0]), Fix: fixVerbs}
	}
	return nil
}

// errnoErr turns the result of a cgo two-value call into an errno error. A
// library that failed without setting errno gets def.
func errnoErr(err error, def syscall.Errno) error {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return def
}

// rcErr turns the int result of a verbs call, which is 0, a positive errno,
// or -1 with errno set, into an error.
func rcErr(rc C.int, err error) error {
	switch {
	case rc == 0:
		return nil
	case rc > 0:
		return syscall.Errno(rc)
	case rc == -1:
		return errnoErr(err, syscall.EIO)
	default:
		return syscall.Errno(-rc)
	}
}

// tryLoad loads lib as libibverbs into a scratch table, leaving the
// package's state alone; for tests.
func tryLoad(lib string) error {
	var t C.struct_xibv_verbs_fns
	return loadVerbs(lib, &t)
}

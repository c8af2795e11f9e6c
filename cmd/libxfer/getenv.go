//go:build cgo

package main

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

// getenv reads the process's environment as C sees it now. Go's os.Getenv
// reads a copy taken when the library was loaded, so it misses what the
// Python caller set since (os.environ["MC_TRANSFER_TIMEOUT"] = ..., which
// Python passes on to C's setenv): Mooncake's variables and XFER_SECRET
// are read here, at each call, as Mooncake's binding reads them.
func getenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return ""
	}
	return C.GoString(v)
}

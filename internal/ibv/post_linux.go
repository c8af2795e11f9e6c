//go:build cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"syscall"
)

// maxPostBatch caps the WRs translated per provider call; a longer batch is
// still posted in one cgo call, as several chains.
const maxPostBatch = 256

// ringError describes a failed post from what the ring recorded. The caller
// fills in BadID.
func ringError(op, obj string, r *C.struct_xibv_ring, rc C.int, n int) *PostError {
	e := &PostError{Op: op, Object: obj, N: n, Posted: int(r.posted), Bad: int(r.bad), Err: syscall.Errno(rc)}
	if e.Bad >= n {
		e.Bad = -1
	}
	return e
}

package kv

import (
	"context"
	"errors"
)

// Mooncake's store error codes (its ErrorCode in types.h), which
// MooncakeCode maps the package's errors to. 0 is success.
const (
	CodeOK                = 0
	CodeInternalError     = -1
	CodeBufferOverflow    = -10  // BUFFER_OVERFLOW: the value does not fit the buffer
	CodeNoAvailableHandle = -200 // NO_AVAILABLE_HANDLE: no room for the value
	CodeInvalidKey        = -400
	CodeInvalidParams     = -600
	CodeObjectNotFound    = -704
	CodeObjectHasLease    = -706
	CodeTransferFail      = -800
	CodeRPCFail           = -900
)

// MooncakeCode is the Mooncake store code of err, an error of this
// package's clients (Client, Cluster), as Mooncake's store would answer
// the same failure (docs/KV.md, "Mooncake's error codes"): 0 for nil,
// CodeObjectNotFound for ErrNotFound, CodeObjectHasLease for ErrHasLease,
// CodeNoAvailableHandle for ErrFull, CodeInvalidKey for ErrInvalidKey,
// CodeBufferOverflow for a *BufferTooSmallError, CodeInvalidParams for
// the rest of ErrInvalid, CodeRPCFail when the server could not be
// reached or answer in time (ErrUnavailable, ErrMoved, the context's
// end), and CodeInternalError for anything else.
func MooncakeCode(err error) int32 {
	var small *BufferTooSmallError
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrNotFound):
		return CodeObjectNotFound
	case errors.Is(err, ErrHasLease):
		return CodeObjectHasLease
	case errors.Is(err, ErrFull):
		return CodeNoAvailableHandle
	case errors.Is(err, ErrInvalidKey):
		return CodeInvalidKey
	case errors.As(err, &small):
		return CodeBufferOverflow
	case errors.Is(err, ErrInvalid):
		return CodeInvalidParams
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrMoved),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return CodeRPCFail
	}
	return CodeInternalError
}

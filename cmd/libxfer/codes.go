package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/xferio/xfer/connector"
)

// ABIVersion is what xfer_abi_version returns. It changes whenever a
// function's signature or meaning does.
const ABIVersion = 5

// Code is an ABI call's result: 0, or one of the negative codes below,
// which the Python binding maps to its exception classes.
type Code int32

// The codes. Their values are part of the ABI.
const (
	CodeOK         Code = 0
	CodeInternal   Code = -1  // a bug: a recovered panic, or an error of no other kind
	CodeInvalid    Code = -2  // bad input: a bad config, key, handle, dtype or shape
	CodeNotFound   Code = -3  // the producer holds no value under the key
	CodeTimeout    Code = -4  // the call's deadline passed first
	CodeClosed     Code = -5  // the connector is closed
	CodePool       Code = -6  // no room in the pool now
	CodeTooLarge   Code = -7  // the value does not fit the pool at all
	CodeRole       Code = -8  // not this connector's role
	CodeReleased   Code = -9  // the buffer was released or published
	CodeProtocol   Code = -10 // the other side broke the control protocol
	CodeObject     Code = -11 // an object that is not plain data, or malformed
	CodeBufferSize Code = -12 // the caller's output buffer is too small
)

// errInvalid marks bad input from the caller.
var errInvalid = errors.New("invalid argument")

// errBufferSize marks an output buffer too small for the answer.
var errBufferSize = errors.New("output buffer too small")

// codeOf classifies err.
func codeOf(err error) Code {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, net.ErrClosed):
		return CodeClosed
	case errors.Is(err, connector.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, context.DeadlineExceeded):
		return CodeTimeout
	case errors.Is(err, connector.ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, connector.ErrPoolExhausted):
		return CodePool
	case errors.Is(err, connector.ErrRole):
		return CodeRole
	case errors.Is(err, connector.ErrReleased):
		return CodeReleased
	case errors.Is(err, connector.ErrProtocol):
		return CodeProtocol
	case errors.Is(err, errObject), errors.Is(err, connector.ErrObject):
		return CodeObject
	case errors.Is(err, errBufferSize):
		return CodeBufferSize
	case errors.Is(err, errInvalid), errors.Is(err, connector.ErrShape), errors.Is(err, connector.ErrMeta):
		return CodeInvalid
	}
	return CodeInternal
}

// guard, deferred by every export, turns a panic into an error in *err
// (CodeInternal): no panic crosses the boundary into C.
func guard(op string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("libxfer: %s: internal error (a panic, caught at the ABI boundary): %v", op, r)
	}
}

package xfer

import "github.com/xferio/xfer/transport"

// OpKind is the kind of an operation in a batch.
type OpKind = transport.OpKind

// Operation kinds.
const (
	OpWrite       = transport.OpWrite
	OpRead        = transport.OpRead
	OpWriteNotify = transport.OpWriteImm
	OpSend        = transport.OpSend
)

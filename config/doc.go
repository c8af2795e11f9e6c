// Package config is xfer's configuration document: the one key table, and
// the decoders of the YAML file and of the JSON that the C ABI takes, used
// by both binaries (cmd/xfer and cmd/libxfer).
//
// # Keys
//
// The keys are those of xfer.Config and of the transport configs it nests
// (tcp.Config, verbs.Config), read from their yaml tags, so that a field
// added to any layer is a key everywhere at once; then the log keys
// (log_level, log_format), the xfer command's metrics_listen, and the
// connector's keys (role, producer, ttl_seconds, pull, chunk_size,
// wait_for_memory, wait_spin) for the C ABI. Program says whose document is decoded;
// Keys lists its keys, each with its environment variables and its flag,
// which is all the xfer command adds (the environment, then the flags,
// over the file).
//
// A nested config's keys take two forms: in its mapping (rdma: {device:
// rxe0}, tcp: {conns: 3}) and at the top level as they were before the
// layers had configs of their own (rdma_device: rxe0, conns: 3). A
// document may use both forms, but not for the same option. The production
// layout of the RDMA transport that xfer replaces (transport: {amst:
// {enable_rdma: true, rdma_device: mlx5_0, ...}}) is accepted too: each of
// its options is honoured or refused with the reason (production.go).
//
// # Errors
//
// A refused document's error is an *Error that lists every problem at
// once, one line each, naming the document, the line and the key:
//
//	xfer.yaml:2: unknown key "memroy_mb": did you mean memory_mb?
//	xfer.yaml:4: unknown key "dwcp": dwcp.log_level (line 5): log_level is a top-level key: write it at the top level
//
// Each problem wraps ErrSyntax, ErrUnknownKey, ErrBadValue or ErrDuplicate.
// Decoding checks each value on its own; Document.Check checks the whole
// as the engine would (xfer.Config.WithDefaults) without opening anything.
//
// # Defaults
//
// As in xfer.Config, the zero value of every field of a Document means the
// documented default; a decoded Document holds only what the document
// said, and the layer that owns a field fills in its default.
//
// # Concurrency
//
// The functions of this package are safe for concurrent use; a Document
// is a value, owned by whoever decoded it.
package config

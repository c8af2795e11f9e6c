//go:build !cgo || !linux

package ibv

// Built reports whether this build has the verbs transport: cgo on Linux.
// Whether the host can use it is Load's answer.
const Built = false

// BuiltReason says why this build has no verbs transport.
const BuiltReason = unsupportedReason

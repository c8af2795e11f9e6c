//go:build cgo

package ibv

// Built reports whether this build has the verbs transport: cgo on Linux.
// Whether the host can use it is Load's answer.
const Built = true

// BuiltReason says why this build has no verbs transport ("" when it has).
const BuiltReason = ""

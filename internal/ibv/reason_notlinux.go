//go:build cgo && !linux

package ibv

const unsupportedReason = "the verbs transport is only available on Linux"

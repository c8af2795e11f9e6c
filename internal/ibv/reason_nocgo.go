//go:build !cgo

package ibv

const unsupportedReason = "xfer was built without cgo (CGO_ENABLED=0): the verbs transport needs cgo"

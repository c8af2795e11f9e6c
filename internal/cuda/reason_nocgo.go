//go:build !cgo

package cuda

const (
	unsupportedReason = "xfer was built without cgo (CGO_ENABLED=0): GPU memory needs cgo"
	unsupportedFix    = "rebuild xfer with CGO_ENABLED=1 and a C compiler (no CUDA toolkit is needed)"
)

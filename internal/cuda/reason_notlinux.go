//go:build cgo && !linux

package cuda

const (
	unsupportedReason = "GPU memory is only supported on Linux, and this is not Linux"
	unsupportedFix    = "run xfer on Linux to use GPU memory"
)

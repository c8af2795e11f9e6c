//go:build !cgo || !linux

package cuda

// Built reports whether this build has CUDA support: cgo on Linux. Whether
// the host can use it is Load's answer.
const Built = false

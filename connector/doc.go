// Package connector moves bytes, objects and tensors from a producer to
// consumers over the xfer engine: the Go counterpart of the put/get
// connectors that inference pipelines use between stages.
//
// This file set holds its value types so far: Tensor (a dtype, a row-major
// shape and contiguous data), typed views of a tensor's data that check
// dtype and alignment, and the safetensors format, which a Python program
// reads with the safetensors package. The types are plain values, safe to
// share read-only between goroutines.
package connector

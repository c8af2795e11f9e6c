// Package connector moves bytes, objects and tensors from a producer to
// consumers over the xfer engine: the Go counterpart of the put/get
// connectors that inference pipelines use between stages.
//
// The package holds its value types so far: Tensor (a dtype, a row-major
// shape and contiguous data), typed views of a tensor's data that check
// dtype and alignment, the safetensors format, which a Python program reads
// with the safetensors package, objects as CBOR with decode limits, and
// Meta, the small serializable description of a stored value that a
// producer's Put returns and a consumer's Get is handed. The types are
// plain values, safe to share read-only between goroutines; every decoder
// is fuzzed.
package connector

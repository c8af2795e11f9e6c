// Package connector moves bytes, objects and tensors from a producer to
// consumers over the xfer engine: the Go counterpart of the put/get
// connector that vLLM-Omni uses between the stages of a pipeline (its
// OmniConnectorBase: put, get, cleanup, health, close), built on the public
// xfer API alone. docs/CONNECTOR.md is the guide.
//
// A producer's Put stores a value in its engine's registered pool and
// returns its size and a Meta: the producer's address, the key, the size,
// the kind, and a tensor's dtype and shape. A consumer's Get, handed that
// Meta, only the producer's address, or nothing (Config.Producer), moves
// the value straight into its own pool with one-sided operations (the
// producer WRITEs it into a buffer the consumer named, or the consumer
// READs it; see Pull; a value of at most 4 KiB comes inline in the
// producer's answer instead) and returns it as a Buffer. Control messages
// are the engine's own messages on the same connection. A value stays in the
// producer until as many consumers as Put asked for (Consumers, Retain)
// have taken it, Cleanup deletes it, or its TTL ends; a consumer that fails
// or gives up does not count as having taken it.
//
// Zero copy: AllocTensor and AllocBytes hand out a Buffer in the pool to
// fill in place, and PutBuffer publishes it without a copy.
//
// Values: Tensor (a dtype, a row-major shape and contiguous data) with
// typed views (View) that check dtype and alignment, and the safetensors
// format, which a Python program reads with the safetensors package;
// objects, any other Go value, as CBOR with decode limits; Meta, with a
// canonical binary form and JSON. Every decoder is fuzzed.
//
// Concurrency and lifetimes: a Connector's methods are safe for concurrent
// use. A Buffer's memory is valid until its Release, PutBuffer or the
// connector's Close, whichever comes first. Close the connector last: it
// fails the Gets in flight and every later call with net.ErrClosed, drops
// the stored values, closes the engine with all its memory and waits for
// the connector's goroutines.
//
// Every call ends, and the dead fail fast: a producer that refuses
// connections fails a Get after the engine's reconnect_wait (2 s); a
// Get, Put or Alloc whose ctx has no deadline ends within the engine's
// op_timeout, a Get that reaches it with a *StalledError naming the
// producer when the producer does not answer a probe either.
// Config.CallTimeout is a longer bound that rides through a restart. The value types are plain values, safe to
// share read-only.
package connector

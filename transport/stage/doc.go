// Package stage moves device memory (a GPU's) for transports that move
// host memory only: tcp, and rdma's local operations. It stages the bytes
// through pinned host memory, with the copies of the device's kind in
// mem's table of memory kinds, so it names no device API itself.
//
// A Stager holds the staging memory of one engine: Size bytes of host
// memory, made on first use, registered with the engine (so that rdma can
// post from it) and pinned with the driver of the first device that
// needed it (so that the device's copies run at full speed; unpinned
// staging works, slower). From it:
//
//   - Post runs an operation whose local memory is on a device over an
//     endpoint that moves host memory only, in pieces of Piece bytes,
//     the device's copies overlapping the transport's;
//   - Remote makes the host copy that stands for a range of a device
//     region a peer accesses (transport.Resolved.Staged).
//
// Needed says when an operation must be staged.
//
// # Threading and lifetimes
//
// A Stager is safe for concurrent use. Close it once the operations that
// use it have ended (the engine's peers are closed), before the engine
// closes its regions and then its devices: Close releases the staging
// memory and fails the staged operations that come after it with
// net.ErrClosed.
package stage

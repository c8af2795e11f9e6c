// Package sys is the one place where xfer talks to the operating system
// through golang.org/x/sys/unix. No other package may import that module.
//
// It offers thin, documented wrappers: anonymous and memfd-backed mmap,
// madvise, the transparent and explicit huge page settings of the kernel,
// and the RLIMIT_MEMLOCK limit. Each wrapper names the operation and its
// size in the error it returns and wraps the errno with %w, so callers can
// still match it with errors.Is.
//
// Platform code lives in file pairs: *_linux.go holds the implementation and
// *_other.go a twin with the same API whose functions fail with an error
// wrapping [ErrNotSupported], so every build configuration compiles.
//
// The functions hold no state and are safe for concurrent use. Memory and
// file descriptors they return belong to the caller, who releases them with
// [Munmap] and [Close].
package sys

import "errors"

// ErrNotSupported means the operation or feature does not exist on this
// platform, build or host. The wrapping error names the operation and says
// why.
//
// It is the module's only not-supported sentinel: internal/ibv, mem,
// transport, probe and the root package xfer re-export this value instead
// of declaring their own, so errors.Is(err, xfer.ErrNotSupported) holds for
// a not-supported error from any layer.
var ErrNotSupported = errors.New("not supported")

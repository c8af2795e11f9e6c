//go:build !cgo || !linux

package ibv

import "fmt"

// errUnsupported is what every call returns in this build.
func errUnsupported(op string) error {
	return fmt.Errorf("%s: %s: %w", op, unsupportedReason, ErrNotSupported)
}

// Load reports that this build cannot use verbs.
func Load() error { return errUnsupported("load libibverbs.so.1") }

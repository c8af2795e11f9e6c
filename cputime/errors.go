package cputime

import "github.com/xferio/xfer/internal/sys"

// ErrNotSupported means CPU time cannot be measured on this platform. It
// is the same value as xfer.ErrNotSupported.
var ErrNotSupported = sys.ErrNotSupported

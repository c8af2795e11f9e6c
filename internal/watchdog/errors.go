package watchdog

import "errors"

// ErrStalled is the error a stalled peer's operations match: the root
// package's ErrStalled.
var ErrStalled = errors.New("peer stalled")

package auth

import (
	"net"
	"sync"
	"time"
)

// WarnPeriod is how often a source's refusals are logged at Warn; the
// others in the period go to Debug, so a scanner does not flood the log.
const WarnPeriod = time.Minute

// maxSources bounds the sources Warnings remembers: past it, it starts
// over, so a warning may come again but memory stays bounded.
const maxSources = 4096

// Warnings says which refusals to log at Warn: a source's first, then one
// per WarnPeriod. Its zero value is ready; safe for concurrent use.
type Warnings struct {
	mu   sync.Mutex
	last map[string]time.Time // source → its latest Warn
}

// Due records a refusal of source at now, and reports whether to log it
// at Warn.
func (w *Warnings) Due(source string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, seen := w.last[source]; seen && now.Sub(last) < WarnPeriod {
		return false
	}
	if w.last == nil || len(w.last) >= maxSources {
		w.last = map[string]time.Time{}
	}
	w.last[source] = now
	return true
}

// Source is the caller's address without its port: who a refusal is
// counted and logged against, whichever port it came from.
func Source(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

package auth

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Failure is one refusal: when, on which plane, for which reason, of which
// source, and what happened (never a secret).
type Failure struct {
	Time   time.Time `json:"time"`
	Plane  string    `json:"plane"`
	Reason string    `json:"reason"`
	Source string    `json:"source"`
	Detail string    `json:"detail,omitempty"`
}

// FailureCount counts the refusals of a plane for a reason.
type FailureCount struct {
	Plane  string `json:"plane"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// MaxRecent bounds the refusals Refusals keeps.
const MaxRecent = 32

// Refusals counts refusals by plane and reason, keeps the latest
// MaxRecent, and says which to log at Warn (Warnings). Its zero value is
// ready; safe for concurrent use.
type Refusals struct {
	mu     sync.Mutex
	counts map[[2]string]uint64 // plane, reason
	recent []Failure
	warned Warnings
}

// Record records f, and reports whether to log it at Warn: its source's
// first refusal, or the first in WarnPeriod.
func (r *Refusals) Record(f Failure) (warn bool) {
	r.mu.Lock()
	if r.counts == nil {
		r.counts = map[[2]string]uint64{}
	}
	r.counts[[2]string{f.Plane, f.Reason}]++
	if len(r.recent) >= MaxRecent {
		r.recent = append(r.recent[:0], r.recent[1:]...)
	}
	r.recent = append(r.recent, f)
	r.mu.Unlock()
	return r.warned.Due(f.Source, f.Time)
}

// Snapshot returns the counts, by plane and reason, and the latest
// refusals, oldest first.
func (r *Refusals) Snapshot() ([]FailureCount, []Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []FailureCount
	for k, n := range r.counts {
		out = append(out, FailureCount{Plane: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b FailureCount) int {
		return strings.Compare(a.Plane+"\x00"+a.Reason, b.Plane+"\x00"+b.Reason)
	})
	return out, slices.Clone(r.recent)
}

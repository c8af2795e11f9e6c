package xfer

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/auth"
)

// The planes of xfer_auth_failures_total and Status.AuthFailures: where a
// refusal happened. Services on the engine report theirs with AuthFailed.
const (
	PlanePeer      = "peer"      // the engine's handshake
	PlaneKV        = "kv"        // the KV service's gRPC and data-plane requests
	PlaneTransfer  = "transfer"  // the transfer tool's control channel
	PlaneDirectory = "directory" // the coordinator
)

// The reasons of xfer_auth_failures_total: a bounded set.
const (
	// ReasonNoProof: the caller sent no proof (no secret, a closed or
	// idle connection, another message).
	ReasonNoProof = "no_proof"
	// ReasonBadProof: the proof was wrong (a different secret).
	ReasonBadProof = "bad_proof"
	// ReasonMalformed: the proof could not be decoded.
	ReasonMalformed = "malformed"
	// ReasonNotAllowed: the caller's address or GID is not in an allowlist.
	ReasonNotAllowed = "not_allowed"
	// ReasonTimeout: the caller did not authenticate within the bound.
	ReasonTimeout = "timeout"
	// ReasonEvicted: the caller was still in its handshake when newer
	// connections needed its place (security.max_pending_handshakes,
	// security.max_pending_per_source).
	ReasonEvicted = "evicted"
)

var authReasons = []string{ReasonNoProof, ReasonBadProof, ReasonMalformed, ReasonNotAllowed, ReasonTimeout, ReasonEvicted}

// authError is a handshake refused for an authentication reason.
type authError struct {
	reason string
	err    error
}

func (e *authError) Error() string { return e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

// AuthFailure is one refusal, in Status.RecentAuthFailures.
type AuthFailure struct {
	Time   time.Time `json:"time"`
	Plane  string    `json:"plane"`
	Reason string    `json:"reason"`
	Source string    `json:"source"`
	Detail string    `json:"detail,omitempty"`
}

// AuthFailureCount counts the refusals of a plane for a reason.
type AuthFailureCount struct {
	Plane  string `json:"plane"`
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// maxRecentAuthFailures bounds Status.RecentAuthFailures.
const maxRecentAuthFailures = 32

type authStats struct {
	mu     sync.Mutex
	counts map[[2]string]uint64 // plane, reason
	recent []AuthFailure
	warned auth.Warnings
}

// AuthFailed records a refusal on a plane (PlanePeer, PlaneKV, ...) for a
// reason (ReasonNoProof, ...): it counts it in xfer_auth_failures_total and
// Status, and logs it at Warn once per source (the caller's address; its
// port is dropped) and minute, at Debug otherwise. err says what happened;
// it must not hold a secret. Services built on the engine call it for
// their own planes.
func (e *Engine) AuthFailed(plane, reason, source string, err error) {
	source = auth.Source(source)
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	now := time.Now()
	s := &e.auth
	s.mu.Lock()
	if s.counts == nil {
		s.counts = map[[2]string]uint64{}
	}
	s.counts[[2]string{plane, reason}]++
	if len(s.recent) >= maxRecentAuthFailures {
		s.recent = append(s.recent[:0], s.recent[1:]...)
	}
	s.recent = append(s.recent, AuthFailure{Time: now.UTC(), Plane: plane, Reason: reason, Source: source, Detail: detail})
	s.mu.Unlock()
	if m := e.metrics; m != nil {
		m.AuthFailed(plane, reason)
	}
	args := []any{"plane", plane, "reason", reason, "source", source, "err", detail}
	if s.warned.Due(source, now) {
		e.log.Warn("refused an unauthenticated caller (logged once per source and minute)", args...)
		return
	}
	e.log.Debug("refused an unauthenticated caller", args...)
}

func (s *authStats) snapshot() ([]AuthFailureCount, []AuthFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []AuthFailureCount
	for k, n := range s.counts {
		out = append(out, AuthFailureCount{Plane: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out, func(a, b AuthFailureCount) int {
		return strings.Compare(a.Plane+"\x00"+a.Reason, b.Plane+"\x00"+b.Reason)
	})
	return out, slices.Clone(s.recent)
}

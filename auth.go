package xfer

import (
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

// The reasons of xfer_auth_failures_total: a bounded set (internal/auth
// says what each means).
const (
	ReasonNoProof    = auth.ReasonNoProof    // no proof: no secret, a closed or idle connection
	ReasonBadProof   = auth.ReasonBadProof   // a wrong proof: a different secret
	ReasonMalformed  = auth.ReasonMalformed  // a proof that could not be decoded
	ReasonNotAllowed = auth.ReasonNotAllowed // an address or GID not in an allowlist
	ReasonTimeout    = auth.ReasonTimeout    // no proof within the bound
	ReasonEvicted    = auth.ReasonEvicted    // dropped in its handshake for newer connections
)

// AuthFailure is one refusal, in Status.RecentAuthFailures.
type AuthFailure = auth.Failure

// AuthFailureCount counts the refusals of a plane for a reason.
type AuthFailureCount = auth.FailureCount

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
	warn := e.auth.Record(auth.Failure{Time: time.Now().UTC(), Plane: plane, Reason: reason, Source: source, Detail: detail})
	if m := e.metrics; m != nil {
		m.AuthFailed(plane, reason)
	}
	args := []any{"plane", plane, "reason", reason, "source", source, "err", detail}
	if warn {
		e.log.Warn("refused an unauthenticated caller (logged once per source and minute)", args...)
		return
	}
	e.log.Debug("refused an unauthenticated caller", args...)
}

package auth

// The reasons of a refusal (Failure.Reason, the reason label of
// xfer_auth_failures_total): a bounded set, which every plane shares.
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

// Reasons lists every reason.
var Reasons = []string{ReasonNoProof, ReasonBadProof, ReasonMalformed, ReasonNotAllowed, ReasonTimeout, ReasonEvicted}

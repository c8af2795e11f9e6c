package xfer

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xferio/xfer/internal/auth"
)

// MinSecretLen is the shortest shared secret Config.Secret accepts, in
// bytes: 16, which a random secret makes 128 bits, beyond offline guessing
// of a captured proof. GenerateSecret makes one of 32 random bytes.
const MinSecretLen = 16

// GenerateSecret returns a new shared secret: 32 random bytes, base64url
// encoded without padding (43 characters), for a secret_file.
func GenerateSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// checkSecret resolves secret_file and checks the secret's length. The
// error never shows the secret.
func (c *Config) checkSecret() error {
	if c.SecretFile != "" {
		b, err := os.ReadFile(c.SecretFile)
		if err != nil {
			return fmt.Errorf("config: secret_file: %w", err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return fmt.Errorf("config: secret_file %s is empty: generate a secret with `xfer secret > %s`", c.SecretFile, c.SecretFile)
		}
		if c.Secret != "" && c.Secret != s {
			return fmt.Errorf("config: secret and secret_file %s both set, and differ: use one of them", c.SecretFile)
		}
		c.Secret = s
	}
	if c.Secret != "" && len(c.Secret) < MinSecretLen {
		return fmt.Errorf("config: secret: %d bytes, at least %d required (a guessable secret lets anyone who captures a handshake find it offline): generate one with `xfer secret > FILE` and set secret_file: FILE",
			len(c.Secret), MinSecretLen)
	}
	return nil
}

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
)

var authReasons = []string{ReasonNoProof, ReasonBadProof, ReasonMalformed, ReasonNotAllowed, ReasonTimeout}

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

// parseAllowedPeers parses security.allowed_peers.
func parseAllowedPeers(list []string) (auth.Allowlist, error) {
	l, err := auth.ParseAllowlist(list)
	if err != nil {
		return nil, fmt.Errorf("config: security.allowed_peers %w", err)
	}
	return l, nil
}

package xfer

import (
	"fmt"
	"slices"

	"github.com/xferio/xfer/internal/auth"
)

// SecurityConfig is the security section of the configuration: policy
// over who may connect. docs/SECURITY.md says what each check covers.
type SecurityConfig struct {
	// RequireAuthentication makes Open refuse to start without a secret
	// (Secret or SecretFile). Default: false.
	RequireAuthentication bool `yaml:"require_authentication"`
	// AllowedPeers lists the addresses (CIDRs, or single addresses) whose
	// connections the engine's listener accepts; any other is closed on
	// accept, before the handshake says anything, and counted
	// (xfer_auth_failures_total{plane="peer",reason="not_allowed"}).
	// Default: none, every address.
	AllowedPeers []string `yaml:"allowed_peers"`
	// MaxPendingHandshakes bounds the inbound connections in their
	// handshake at once (before they authenticate; without a secret,
	// before their hello). One more makes the oldest give way: it is
	// closed and counted (xfer_auth_failures_total{plane="peer",
	// reason="evicted"}), so connections that hold the port open cannot
	// lock peers out. Default: 256 (DefaultMaxPendingHandshakes).
	MaxPendingHandshakes int `yaml:"max_pending_handshakes"`
	// MaxPendingPerSource bounds those from one address: one more from an
	// address at its bound makes that address's oldest give way, not
	// another's. Default: 32 (DefaultMaxPendingPerSource), never more than
	// max_pending_handshakes.
	MaxPendingPerSource int `yaml:"max_pending_per_source"`
	// RDMA is the rdma transport's policy, in the layout of the RDMA
	// guide: security: {rdma: {allowed_gids: [...], require_authentication: true}}.
	// Default: SecurityRDMAConfig's defaults, which allow every GID.
	RDMA SecurityRDMAConfig `yaml:"rdma"`
}

// SecurityRDMAConfig is security.rdma.
type SecurityRDMAConfig struct {
	// AllowedGIDs lists the GIDs (fe80:0000:0000:0000:0002:c903:0086:a100,
	// or any IPv6 form) of the peers the rdma transport may connect to:
	// checked against the GID a peer's handshake gives before its queue
	// pair is connected; a peer with another is not served over rdma (auto
	// goes on to the next transport) and is counted as not_allowed.
	// Default: none, every GID.
	AllowedGIDs []string `yaml:"allowed_gids"`
	// RequireAuthentication is RequireAuthentication, as the RDMA guide
	// spells it. Default: false.
	RequireAuthentication bool `yaml:"require_authentication"`
}

// Clone returns a copy of s that shares no slice with it.
func (s SecurityConfig) Clone() SecurityConfig {
	s.AllowedPeers = slices.Clone(s.AllowedPeers)
	s.RDMA.AllowedGIDs = slices.Clone(s.RDMA.AllowedGIDs)
	return s
}

// The defaults of security.max_pending_handshakes and
// security.max_pending_per_source.
const (
	DefaultMaxPendingHandshakes = 256
	DefaultMaxPendingPerSource  = 32
)

// parseGIDs parses security.rdma.allowed_gids.
func parseGIDs(list []string) ([][16]byte, error) {
	gids, err := auth.ParseGIDs(list)
	if err != nil {
		return nil, fmt.Errorf("config: security.rdma.allowed_gids %w", err)
	}
	return gids, nil
}

// MinSecretLen is the shortest shared secret Config.Secret accepts, in
// bytes: 16, which a random secret makes 128 bits, beyond offline guessing
// of a captured proof. GenerateSecret makes one of 32 random bytes.
const MinSecretLen = auth.MinSecretLen

// GenerateSecret returns a new shared secret: 32 random bytes, base64url
// encoded without padding (43 characters), for a secret_file.
func GenerateSecret() (string, error) { return auth.GenerateSecret() }

// parseAllowedPeers parses security.allowed_peers.
func parseAllowedPeers(list []string) (auth.Allowlist, error) {
	l, err := auth.ParseAllowlist(list)
	if err != nil {
		return nil, fmt.Errorf("config: security.allowed_peers %w", err)
	}
	return l, nil
}

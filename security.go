package xfer

import (
	"fmt"
	"net"
	"slices"
	"strings"
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

// checkSecurity validates the security section.
func (c *Config) checkSecurity() error {
	if (c.Security.RequireAuthentication || c.Security.RDMA.RequireAuthentication) && c.Secret == "" {
		return fmt.Errorf("config: security.require_authentication is set and there is no secret: generate one with `xfer secret > FILE` and set secret_file: FILE")
	}
	if _, err := parseAllowedPeers(c.Security.AllowedPeers); err != nil {
		return err
	}
	if _, err := parseGIDs(c.Security.RDMA.AllowedGIDs); err != nil {
		return err
	}
	return nil
}

// parseGIDs parses security.rdma.allowed_gids.
func parseGIDs(list []string) ([][16]byte, error) {
	var out [][16]byte
	for _, s := range list {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil || ip.To16() == nil {
			return nil, fmt.Errorf("config: security.rdma.allowed_gids %q: want a GID, as IPv6 (fe80:0000:0000:0000:0002:c903:0086:a100)", s)
		}
		out = append(out, [16]byte(ip.To16()))
	}
	return out, nil
}

// gidAllowed checks the GID in a peer's handshake blob for transport name
// against security.rdma.allowed_gids: nil when there is no list, the
// transport has no GIDs, or the GID is on the list.
func (e *Engine) gidAllowed(name string, blob []byte) error {
	r := transportRowOf(name)
	if len(e.allowedGIDs) == 0 || r == nil || r.peerGIDs == nil {
		return nil
	}
	gids, err := r.peerGIDs(blob)
	if err != nil {
		return fmt.Errorf("%s: the peer's description: %w", name, err)
	}
	for _, gid := range gids {
		if !slices.Contains(e.allowedGIDs, gid) {
			return fmt.Errorf("%s: the peer's GID %s is not in security.rdma.allowed_gids", name, net.IP(gid[:]))
		}
	}
	return nil
}

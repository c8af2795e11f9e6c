package auth

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strings"
)

// MinSecretLen is the shortest shared secret any plane accepts, in bytes:
// 16, which a random secret makes 128 bits, beyond offline guessing of a
// captured proof. GenerateSecret makes one of 32 random bytes.
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

// ReadSecretFile reads the secret (or token: what names it) in the file at
// path, which the configuration key names: surrounding white space is
// dropped, and an empty file is an error that says how to make one. The
// errors never show the secret.
func ReadSecretFile(key, what, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s %s is empty: generate a %s with `xfer secret > %s`", key, path, what, path)
	}
	return s, nil
}

// CheckSecret checks that secret, when set, is long enough. The error
// never shows the secret.
func CheckSecret(secret string) error {
	if secret != "" && len(secret) < MinSecretLen {
		return fmt.Errorf("secret: %d bytes, at least %d required (a guessable secret lets anyone who captures a handshake find it offline): generate one with `xfer secret > FILE` and set secret_file: FILE",
			len(secret), MinSecretLen)
	}
	return nil
}

// ParseGIDs parses a list of RDMA GIDs in any IPv6 form
// (security.rdma.allowed_gids).
func ParseGIDs(list []string) ([][16]byte, error) {
	var out [][16]byte
	for _, s := range list {
		ip := net.ParseIP(strings.TrimSpace(s))
		if ip == nil || ip.To16() == nil {
			return nil, fmt.Errorf("%q: want a GID, as IPv6 (fe80:0000:0000:0000:0002:c903:0086:a100)", s)
		}
		out = append(out, [16]byte(ip.To16()))
	}
	return out, nil
}

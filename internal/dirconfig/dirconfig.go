// Package dirconfig checks the directory keys of the engine's
// configuration (directory, node_id, directory_ttl, directory_token_file,
// directory_tls_*) and reads the files they name: the coordinator's token
// and the TLS client configuration. The directory itself is reached only
// by the engine's Open, through package directory.
package dirconfig

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/auth"
)

// DefaultTTL is directory_ttl's default.
const DefaultTTL = 10 * time.Second

// Keys are the directory keys of a configuration, and its listen address.
type Keys struct {
	Directory, NodeID, Listen string
	TTL                       time.Duration
	TLSCert, TLSKey           string
}

// Check validates k and returns the directory ("p2p" for none) and the TTL
// with their defaults filled in. Its errors name the key.
func Check(k Keys) (dir string, ttl time.Duration, err error) {
	switch d := strings.TrimSpace(k.Directory); {
	case d == "" || d == "p2p":
		dir = "p2p"
	case strings.HasPrefix(d, "http://") || strings.HasPrefix(d, "https://") || strings.HasPrefix(d, "etcd://"):
		dir = d
	default:
		return "", 0, fmt.Errorf("config: directory %q: want p2p, http://HOST:PORT or etcd://HOST:2379[,HOST:2379...]/PREFIX", k.Directory)
	}
	if k.NodeID != "" {
		if err := directory.CheckNodeID(k.NodeID); err != nil {
			return "", 0, fmt.Errorf("config: node_id %q: want 1 to %d characters of [A-Za-z0-9._-]", k.NodeID, directory.MaxNodeID)
		}
		if dir == "p2p" {
			return "", 0, fmt.Errorf("config: node_id %q: needs a directory to register in (directory: http://HOST:PORT or etcd://HOST:2379/PREFIX)", k.NodeID)
		}
		if k.Listen == "" {
			return "", 0, fmt.Errorf("config: node_id %q: a node registers where it listens: set listen", k.NodeID)
		}
	}
	switch {
	case k.TLSCert != "" && k.TLSKey == "":
		return "", 0, fmt.Errorf("config: directory_tls_cert %s: needs its key (directory_tls_key)", k.TLSCert)
	case k.TLSKey != "" && k.TLSCert == "":
		return "", 0, fmt.Errorf("config: directory_tls_key %s: needs its certificate (directory_tls_cert)", k.TLSKey)
	}
	switch ttl = k.TTL; {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < 100*time.Millisecond || ttl > 10*time.Minute:
		return "", 0, fmt.Errorf("config: directory_ttl %v: must be between 100ms and 10m", ttl)
	}
	return dir, ttl, nil
}

// Token returns the coordinator's token from file (directory_token_file),
// or "" without one.
func Token(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	return auth.ReadSecretFile("directory_token_file", "token", file)
}

// TLS returns the directory client's TLS configuration from the PEM files
// of its certificate, key and CA, or nil without them.
func TLS(cert, key, ca string) (*tls.Config, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	return directory.LoadTLS(cert, key, ca)
}

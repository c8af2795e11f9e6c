package directory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Entry is what a node publishes about itself.
type Entry struct {
	// NodeID names the node: 1 to 128 characters of [A-Za-z0-9._-].
	NodeID string `json:"node_id"`
	// Addrs are the addresses (host:port) the node's engine accepts peers
	// on, best first.
	Addrs []string `json:"addrs"`
	// Transports are the transports the node offers (tcp, shm, rdma).
	Transports []string `json:"transports,omitempty"`
	// Exports are the regions the node exports by name; a peer gets their
	// descriptors (and keys) from the node's handshake, never from here.
	Exports []Export `json:"exports,omitempty"`
	// RDMA is the node's RDMA endpoint, when it publishes one ahead of
	// time.
	RDMA *RDMAEndpoint `json:"rdma,omitempty"`
	// Services are the node's services other than its engine, by name,
	// each at a host:port: "kv" is a KV server's gRPC address.
	Services map[string]string `json:"services,omitempty"`
}

// Export is a region a node exports: its name and size.
type Export struct {
	Name string `json:"name"`
	Len  uint64 `json:"len"`
}

// RDMAEndpoint is an RDMA queue pair's address, as an out-of-band exchange
// publishes it: queue pair number, LID (InfiniBand), GID (RoCE, iWARP) and
// the first packet sequence number.
type RDMAEndpoint struct {
	QPN uint32 `json:"qpn"`
	LID uint16 `json:"lid"`
	GID string `json:"gid"`
	PSN uint32 `json:"psn"`
}

// Limits of an entry.
const (
	MaxNodeID     = 128
	MaxAddrs      = 16
	MaxTransports = 8
	MaxExports    = 1024
	MaxExportName = 256
	MaxServices   = 16
	MaxService    = 64 // the length of a service's name
	// MaxEntrySize bounds an encoded entry, and what a decoder reads.
	MaxEntrySize = 256 << 10
)

// ErrInvalid matches errors about malformed entries and node IDs.
var ErrInvalid = errors.New("invalid directory entry")

func invalid(format string, args ...any) error {
	return fmt.Errorf("directory: %s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// CheckNodeID reports whether id is a valid node ID.
func CheckNodeID(id string) error {
	if len(id) == 0 || len(id) > MaxNodeID {
		return invalid("node id %q: want 1 to %d characters", truncate(id), MaxNodeID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalid("node id %q: character %q at %d: want letters, digits, '.', '_' or '-'", truncate(id), c, i)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// maxTransportName bounds a transport's name in an entry.
const maxTransportName = 16

// checkTransportName reports whether name looks like a transport's name:
// 1 to maxTransportName lower-case letters, digits, '-' or '_'. The
// directory does not keep a list of the engine's transports: an entry may
// name one that a newer engine has, and an engine ignores names it does not
// know.
func checkTransportName(name string) bool {
	if name == "" || len(name) > maxTransportName {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Check reports whether e is well-formed.
func (e *Entry) Check() error {
	if err := CheckNodeID(e.NodeID); err != nil {
		return err
	}
	if len(e.Addrs) == 0 || len(e.Addrs) > MaxAddrs {
		return invalid("node %s: %d addresses: want 1 to %d", e.NodeID, len(e.Addrs), MaxAddrs)
	}
	for _, a := range e.Addrs {
		if err := checkAddr(e.NodeID, a); err != nil {
			return err
		}
	}
	if len(e.Transports) > MaxTransports {
		return invalid("node %s: %d transports: at most %d", e.NodeID, len(e.Transports), MaxTransports)
	}
	for _, t := range e.Transports {
		if !checkTransportName(t) {
			return invalid("node %s: transport %q: want 1 to %d lower-case letters, digits, '-' or '_'", e.NodeID, truncate(t), maxTransportName)
		}
	}
	if len(e.Exports) > MaxExports {
		return invalid("node %s: %d exports: at most %d", e.NodeID, len(e.Exports), MaxExports)
	}
	for _, x := range e.Exports {
		if x.Name == "" || len(x.Name) > MaxExportName {
			return invalid("node %s: export name of %d bytes: want 1 to %d", e.NodeID, len(x.Name), MaxExportName)
		}
	}
	if len(e.Services) > MaxServices {
		return invalid("node %s: %d services: at most %d", e.NodeID, len(e.Services), MaxServices)
	}
	for name, a := range e.Services {
		if name == "" || len(name) > MaxService || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			return invalid("node %s: service name %q: want 1 to %d of [a-z0-9_-]", e.NodeID, truncate(name), MaxService)
		}
		if err := checkAddr(e.NodeID, a); err != nil {
			return err
		}
	}
	if e.RDMA != nil {
		return e.RDMA.check(e.NodeID)
	}
	return nil
}

// check reports whether r, node's endpoint, is well-formed.
func (r *RDMAEndpoint) check(node string) error {
	if r.QPN >= 1<<24 || r.PSN >= 1<<24 {
		return invalid("node %s: rdma endpoint: qpn %d and psn %d must be below 2^24", node, r.QPN, r.PSN)
	}
	if r.GID != "" {
		if a, err := netip.ParseAddr(r.GID); err != nil || !a.Is6() && !a.Is4() {
			return invalid("node %s: rdma endpoint: gid %q: want an IPv6-form GID", node, truncate(r.GID))
		}
	}
	if r.GID == "" && r.LID == 0 {
		return invalid("node %s: rdma endpoint: neither a LID nor a GID", node)
	}
	return nil
}

// checkAddr reports whether a is a host:port with a port of 1 to 65535.
func checkAddr(node, a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || len(a) > 300 {
		return invalid("node %s: address %q: want host:port", node, truncate(a))
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return invalid("node %s: address %q: port must be 1 to 65535", node, truncate(a))
	}
	return nil
}

// Marshal encodes e as JSON, after checking it.
func (e *Entry) Marshal() ([]byte, error) {
	if err := e.Check(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("directory: encode node %s: %w", e.NodeID, err)
	}
	if len(b) > MaxEntrySize {
		return nil, invalid("node %s: entry of %d bytes: at most %d", e.NodeID, len(b), MaxEntrySize)
	}
	return b, nil
}

// Unmarshal decodes and checks an entry. Unknown fields are ignored (a newer
// node may publish more); anything malformed is an error matching
// ErrInvalid.
func Unmarshal(b []byte) (Entry, error) {
	if len(b) > MaxEntrySize {
		return Entry{}, invalid("entry of %d bytes: at most %d", len(b), MaxEntrySize)
	}
	var e Entry
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&e); err != nil {
		return Entry{}, invalid("decode: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return Entry{}, invalid("trailing data after the entry")
	}
	if err := e.Check(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

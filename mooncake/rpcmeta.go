package mooncake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// RPCMetaPrefix is where Mooncake engines publish where their segments
// listen: RPCMetaPrefix + segment name.
const RPCMetaPrefix = "mooncake/rpc_meta/"

// RPCMetaKey is the key of segment's RPCMeta.
func RPCMetaKey(segment string) string { return RPCMetaPrefix + segment }

// RPCMeta says where a segment's engine listens, as Mooncake's rpc_meta
// entry does: {"ip_or_host_name": "10.0.0.2", "rpc_port": 12345}.
type RPCMeta struct {
	Host string `json:"ip_or_host_name"`
	Port int    `json:"rpc_port"`
}

// Addr is host:port.
func (m RPCMeta) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// check refuses a host that is empty or not a plain host name or address,
// and a port outside 1..65535.
func (m RPCMeta) check() error {
	if m.Host == "" || len(m.Host) > 255 || strings.ContainsAny(m.Host, " /?#@[]\t\r\n") {
		return fmt.Errorf("mooncake metadata: rpc_meta host %q: want a host name or address", truncate(m.Host))
	}
	if m.Port < 1 || m.Port > 65535 {
		return fmt.Errorf("mooncake metadata: rpc_meta port %d: want 1 to 65535", m.Port)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// Marshal encodes m as Mooncake does.
func (m RPCMeta) Marshal() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// ParseRPCMeta decodes and checks an rpc_meta value. Fields it does not
// know (Mooncake adds some, such as barex_port) are ignored.
func ParseRPCMeta(b []byte) (RPCMeta, error) {
	var m RPCMeta
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&m); err != nil {
		return RPCMeta{}, fmt.Errorf("mooncake metadata: rpc_meta %q: %w", truncate(string(b)), err)
	}
	if d.More() {
		return RPCMeta{}, fmt.Errorf("mooncake metadata: rpc_meta %q: trailing data", truncate(string(b)))
	}
	if err := m.check(); err != nil {
		return RPCMeta{}, err
	}
	return m, nil
}

// PublishRPCMeta publishes where segment listens. A server that holds
// another value for it (Mooncake's HTTP server refuses to overwrite one)
// is an error naming the segment.
func PublishRPCMeta(ctx context.Context, s Store, segment string, m RPCMeta) error {
	if segment == "" {
		return errors.New("mooncake metadata: empty segment name")
	}
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	if err := s.Put(ctx, RPCMetaKey(segment), b); err != nil {
		return fmt.Errorf("mooncake metadata: publish segment %q at %s (is another engine using that name?): %w", segment, m.Addr(), err)
	}
	return nil
}

// ResolveRPCMeta returns where segment listens; an unpublished segment is
// an error matching ErrNotFound.
func ResolveRPCMeta(ctx context.Context, s Store, segment string) (RPCMeta, error) {
	if segment == "" {
		return RPCMeta{}, errors.New("mooncake metadata: empty segment name")
	}
	b, err := s.Get(ctx, RPCMetaKey(segment))
	if err != nil {
		return RPCMeta{}, fmt.Errorf("mooncake metadata: segment %q: %w", segment, err)
	}
	m, err := ParseRPCMeta(b)
	if err != nil {
		return RPCMeta{}, fmt.Errorf("mooncake metadata: segment %q: %w", segment, err)
	}
	return m, nil
}

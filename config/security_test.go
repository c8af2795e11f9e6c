package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSecuritySection: the RDMA guide's security block is accepted as
// written, in YAML and JSON, and its keys reach the engine's config.
func TestSecuritySection(t *testing.T) {
	const guide = `
security:
  rdma:
    allowed_gids:
      - "fe80:0000:0000:0000:0002:c903:0086:a100"
    require_authentication: true
`
	doc, err := DecodeYAML("guide.yaml", []byte(guide), Command)
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Engine.Security
	if !s.RDMA.RequireAuthentication || !reflect.DeepEqual(s.RDMA.AllowedGIDs, []string{"fe80:0000:0000:0000:0002:c903:0086:a100"}) {
		t.Fatalf("security: %+v", s)
	}
	if _, err := doc.Engine.WithDefaults(); err == nil || !strings.Contains(err.Error(), "require_authentication") {
		t.Fatalf("require_authentication without a secret: %v", err)
	}
	doc, err = DecodeYAML("flow.yaml", []byte("security: {allowed_peers: [10.0.0.0/8, \"::1\"], require_authentication: true, rdma: {allowed_gids: [fe80::1]}}\nsecret: 0123456789abcdef0123\n"), Command)
	if err != nil {
		t.Fatal(err)
	}
	if s := doc.Engine.Security; !s.RequireAuthentication || len(s.AllowedPeers) != 2 || len(s.RDMA.AllowedGIDs) != 1 {
		t.Fatalf("security: %+v", s)
	}
	if _, err := doc.Engine.WithDefaults(); err != nil {
		t.Fatal(err)
	}
	doc, err = DecodeJSON("engine", []byte(`{"security":{"allowed_peers":["127.0.0.1"],"rdma":{"allowed_gids":["fe80::2"]}}}`), Library)
	if err != nil || len(doc.Engine.Security.AllowedPeers) != 1 || len(doc.Engine.Security.RDMA.AllowedGIDs) != 1 {
		t.Fatalf("json: %+v %v", doc.Engine.Security, err)
	}
	for _, bad := range []string{
		"security: {allowed_peers: [[1]]}",
		"security: {rdma: {allowed_gid: [fe80::1]}}",
		"security: {rdma: 7}",
		"security: {require_authentication: [true]}",
	} {
		if _, err := DecodeYAML("bad.yaml", []byte(bad), Command); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	doc, _ = DecodeYAML("bad.yaml", []byte("security: {allowed_peers: [not-an-address]}"), Command)
	if _, err := doc.Engine.WithDefaults(); err == nil || !strings.Contains(err.Error(), "security.allowed_peers") {
		t.Errorf("a bad CIDR: %v", err)
	}
	var pe *Error
	_, err = DecodeYAML("bad.yaml", []byte("security:\n  rdma:\n    allowed_gid: [fe80::1]\n"), Command)
	if !errors.As(err, &pe) || pe.Problems[0].Line != 3 {
		t.Errorf("an unknown key in security.rdma: %v", err)
	}
}

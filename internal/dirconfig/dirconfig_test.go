package dirconfig

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	dir, ttl, err := Check(Keys{Directory: " "})
	if err != nil || dir != "p2p" || ttl != DefaultTTL {
		t.Fatalf("defaults: %q, %v, %v", dir, ttl, err)
	}
	dir, _, err = Check(Keys{Directory: "etcd://h:2379/x ", NodeID: "n1", Listen: ":0", TTL: time.Second})
	if err != nil || dir != "etcd://h:2379/x" {
		t.Fatalf("etcd: %q, %v", dir, err)
	}
	for _, c := range []struct {
		k    Keys
		want string
	}{
		{Keys{Directory: "ftp://x"}, "config: directory"},
		{Keys{NodeID: "n1", Listen: ":0"}, "needs a directory"},
		{Keys{Directory: "http://h:1", NodeID: "n1"}, "set listen"},
		{Keys{Directory: "http://h:1", NodeID: "bad id", Listen: ":0"}, "config: node_id"},
		{Keys{TLSCert: "c.pem"}, "needs its key"},
		{Keys{TLSKey: "k.pem"}, "needs its certificate"},
		{Keys{TTL: time.Millisecond}, "directory_ttl"},
	} {
		if _, _, err := Check(c.k); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.k, err, c.want)
		}
	}
}

func TestNone(t *testing.T) {
	if tok, err := Token(""); tok != "" || err != nil {
		t.Fatalf("Token: %q, %v", tok, err)
	}
	if c, err := TLS("", "", ""); c != nil || err != nil {
		t.Fatalf("TLS: %v, %v", c, err)
	}
}

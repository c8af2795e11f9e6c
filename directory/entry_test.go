package directory

import (
	"errors"
	"strings"
	"testing"
)

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
func contains(s, sub string) bool            { return strings.Contains(s, sub) }

func TestEntryRoundTrip(t *testing.T) {
	e := entry("n1", "[fe80::1]:7471")
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeID != "n1" || got.Addrs[0] != "[fe80::1]:7471" || got.RDMA.PSN != 77 || got.Exports[0].Len != 1<<20 {
		t.Fatalf("%+v", got)
	}
	// A transport this version does not know is kept: an engine ignores
	// names it does not know.
	if got, err := Unmarshal([]byte(`{"node_id":"n","addrs":["h:1"],"transports":["gpu_direct","tcp"]}`)); err != nil || got.Transports[0] != "gpu_direct" {
		t.Fatalf("%+v, %v", got, err)
	}
	// A newer node's extra fields are ignored.
	if _, err := Unmarshal([]byte(`{"node_id":"n","addrs":["h:1"],"zone":"eu"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestEntryInvalid(t *testing.T) {
	for name, s := range map[string]string{
		"not json":        `nope`,
		"trailing":        `{"node_id":"n","addrs":["h:1"]} {}`,
		"no id":           `{"addrs":["h:1"]}`,
		"long id":         `{"node_id":"` + strings.Repeat("x", 129) + `","addrs":["h:1"]}`,
		"no addrs":        `{"node_id":"n"}`,
		"port 0":          `{"node_id":"n","addrs":["h:0"]}`,
		"port 70000":      `{"node_id":"n","addrs":["h:70000"]}`,
		"bad gid":         `{"node_id":"n","addrs":["h:1"],"rdma":{"gid":"zz"}}`,
		"no lid nor gid":  `{"node_id":"n","addrs":["h:1"],"rdma":{"qpn":1}}`,
		"empty export":    `{"node_id":"n","addrs":["h:1"],"exports":[{"name":""}]}`,
		"wrong type":      `{"node_id":5,"addrs":["h:1"]}`,
		"service name":    `{"node_id":"n","addrs":["h:1"],"services":{"K V":"h:2"}}`,
		"transport name":  `{"node_id":"n","addrs":["h:1"],"transports":["TCP"]}`,
		"long transport":  `{"node_id":"n","addrs":["h:1"],"transports":["` + strings.Repeat("t", 17) + `"]}`,
		"empty transport": `{"node_id":"n","addrs":["h:1"],"transports":[""]}`,
		"service addr":    `{"node_id":"n","addrs":["h:1"],"services":{"kv":"h"}}`,
		"service port":    `{"node_id":"n","addrs":["h:1"],"services":{"kv":"h:0"}}`,
		"too big":         `{"node_id":"n","addrs":["h:1"],"x":"` + strings.Repeat("a", MaxEntrySize) + `"}`,
	} {
		if _, err := Unmarshal([]byte(s)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// FuzzUnmarshal: any input is an entry that checks and encodes back to
// one that decodes the same, or an ErrInvalid; never a panic.
func FuzzUnmarshal(f *testing.F) {
	b, _ := (&Entry{NodeID: "n", Addrs: []string{"h:1"}, RDMA: &RDMAEndpoint{QPN: 1, LID: 2, PSN: 3}}).Marshal()
	f.Add(b)
	f.Add([]byte(`{"node_id":"a","addrs":["[::1]:2"],"transports":["shm"],"exports":[{"name":"x","len":4}]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"node_id":"a","addrs":["h:2"],"services":{"kv":"h:3","x-1":"[::1]:4"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v does not match ErrInvalid", err)
			}
			return
		}
		again, err := e.Marshal()
		if err != nil {
			t.Fatalf("a decoded entry does not encode: %v", err)
		}
		e2, err := Unmarshal(again)
		if err != nil {
			t.Fatalf("a re-encoded entry does not decode: %v", err)
		}
		if string(mustMarshal(t, e2)) != string(again) {
			t.Fatal("the entry changed on a second round trip")
		}
	})
}

func mustMarshal(t *testing.T, e Entry) []byte {
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

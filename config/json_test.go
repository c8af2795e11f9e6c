package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer/config/configtest"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/transport/verbs"
)

// The JSON document takes the same keys, in the same forms, as the YAML
// file, and decodes to the same Document.
func TestJSONSameAsYAML(t *testing.T) {
	for _, tc := range []struct{ yaml, json string }{
		{configtest.Full, `{"listen":"127.0.0.1:7471","advertise":"host.example:7471","transport":"shm","memory_mb":256,"huge_pages":"off",
			"secret":"s3cret-s3cret-s3cret","conns":4,"max_message":1048576,"recv_depth":64,"handshake_timeout":"5s","log_level":"INFO","log_format":"json",
			"metrics_listen":"127.0.0.1:9464"}`},
		{"tcp:\n  conns: 3\nrdma:\n  gid_index: 1\n  use_cm: true\n", `{"tcp":{"conns":3},"rdma":{"gid_index":1,"use_cm":true}}`},
		{"conns: 3\nrdma_gid_index: 1\nrdma_use_cm: true\nhandshake_timeout:\n", `{"conns":3,"rdma_gid_index":"1","rdma_use_cm":"true","handshake_timeout":null}`},
		{"transport:\n  amst:\n    enable_rdma: false\n    rdma_send_buffer_mb: 100\n", `{"transport":{"amst":{"enable_rdma":false,"rdma_send_buffer_mb":100}}}`},
	} {
		y, err := DecodeYAML("y", []byte(tc.yaml), Command)
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		j, err := DecodeJSON("j", []byte(tc.json), Command)
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if !reflect.DeepEqual(y, j) {
			t.Errorf("YAML %+v\nJSON %+v", y, j)
		}
	}
}

// The connector's keys are the library's; device is rdma.device.
func TestLibraryKeys(t *testing.T) {
	doc, err := DecodeJSON("xfer_open", []byte(`{"role":"producer","producer":"h:1","ttl_seconds":-1,"pull":"read","chunk_size":65536,
		"wait_for_memory":true,"wait_spin":"20us","call_timeout":"30s","device":"rxe0","conns":3,"rdma":{"gid_index":2,"use_cm":true},"log_level":"debug"}`), Library)
	if err != nil {
		t.Fatal(err)
	}
	want := Document{Role: connector.RoleProducer, Producer: "h:1", TTL: -1, Pull: connector.PullRead, ChunkSize: 65536, WaitForMemory: true, WaitSpin: 20 * time.Microsecond, CallTimeout: 30 * time.Second, LogLevel: "debug"}
	want.Engine.RDMA = verbs.Config{Device: "rxe0", GIDIndex: verbs.GID(2), UseCM: true}
	want.Engine.TCP.Conns = 3
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("got  %+v\nwant %+v", doc, want)
	}
	for in, ttl := range map[string]time.Duration{"0": 0, "1.5": 1500 * time.Millisecond, "1e-12": time.Nanosecond, "-0.5": -1} {
		doc, err := DecodeJSON("j", []byte(`{"ttl_seconds":`+in+`}`), Library)
		if err != nil || doc.TTL != ttl {
			t.Errorf("ttl_seconds %s: %v, %v; want %v", in, doc.TTL, err, ttl)
		}
	}
	cfg, err := doc.Connector(&strings.Builder{})
	if err != nil || cfg.Role != connector.RoleProducer || cfg.Engine.TCP.Conns != 3 || cfg.WaitSpin != 20*time.Microsecond || cfg.CallTimeout != 30*time.Second || cfg.Logger == nil || cfg.Engine.Logger == nil {
		t.Errorf("Connector: %+v, %v", cfg, err)
	}
	if _, err := DecodeJSON("j", []byte(`{"role":"producer"}`), Command); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("role in the command's document: %v", err)
	}
}

func TestJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		kind       error
	}{
		{``, `j:1: syntax error: unexpected EOF`, ErrSyntax},
		{`[]`, `j:1: expected a mapping`, ErrSyntax},
		{`{} {}`, `j:1: syntax error: data after the JSON value`, ErrSyntax},
		{"{\n\"memory_mb\": 1,\n\"colour\": \"x\",\n\"memroy\": 2\n}", "j:3: unknown key \"colour\": (known keys: listen,", ErrUnknownKey},
		{"{\n\"memory_mb\": 1,\n\"colour\": \"x\",\n\"memroy\": 2\n}", "\nj:4: unknown key \"memroy\": did you mean memory?", ErrUnknownKey},
		{"{\"conns\": 1,\n \"conns\": 2}", `j:2: key "conns" repeats the one on line 1`, ErrDuplicate},
		{`{"device":"a","rdma":{"device":"b"}}`, `j:1: key "rdma.device" sets the same option as "device" on line 1`, ErrDuplicate},
		{`{"memory_mb":"abc"}`, `j:1: memory_mb: "abc": not an integer`, ErrBadValue},
		{`{"memory_mb":1.5}`, `j:1: memory_mb: "1.5": not an integer`, ErrBadValue},
		{`{"conns":[1]}`, `j:1: conns: expected a single value`, ErrBadValue},
		{`{"role":"sender"}`, `j:1: role: "sender": not one of producer, consumer, both`, ErrBadValue},
		{`{"pull":"push"}`, `j:1: pull: "push": not one of auto, read, write`, ErrBadValue},
		{`{"ttl_seconds":1e300}`, `ttl_seconds: "1e300": out of range`, ErrBadValue},
		{`{"chunk_size":-5}`, `chunk_size: "-5": must not be negative`, ErrBadValue},
		{"{\n\"a\": {\"b\": [1, 2,, 3]}}", "j:2: syntax error: invalid character ','", ErrSyntax},
		{strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested more than 64 deep", ErrSyntax},
	} {
		_, err := DecodeJSON("j", []byte(tc.text), Library)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.kind) {
			t.Errorf("%q: error %v\nwant it to contain %q (%v)", tc.text, err, tc.want, tc.kind)
		}
	}
}

// FuzzDecodeYAML: any file is either decoded or refused with an error that
// names it; nothing panics, what is accepted decodes the same way twice,
// and a decoded document's Check does not panic either.
func FuzzDecodeYAML(f *testing.F) {
	for _, s := range []string{configtest.Full, "transport:\n  amst:\n    enable_rdma: false\n    rdma_max_sge: 4\n    rdma_send_buffer_mb: 99\n",
		"rdma:\n  device: rxe0\ntcp: {conns: 2}\nlog_format: json\n", "metrics_listen: 127.0.0.1:9464\n", "metrics_listen: [a]\n",
		"transport: {amst: {rdma_qp_type: UD}}", "[1, 2]", "a: {b: c}", "dwcp: {log_level: info}", "x: &a [*a]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range []Program{Command, Library} {
			a, errA := DecodeYAML("f.yaml", data, p)
			b, errB := DecodeYAML("f.yaml", data, p)
			checkDecoded(t, a, b, errA, errB, "f.yaml")
		}
	})
}

// FuzzDecodeJSON is FuzzDecodeYAML for the JSON decoder.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"role":"producer","listen":"127.0.0.1:0","transport":"tcp","memory_mb":8}`, `{"ttl_seconds":-1}`,
		`{"tcp":{"conns":3},"rdma":{"gid_index":1,"use_cm":true}}`, `{"transport":{"amst":{"enable_rdma":true}}}`, `{"a":{"b":[1,{}]}}`, `[`, `{"conns":1,"conns":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range []Program{Command, Library} {
			a, errA := DecodeJSON("f.json", data, p)
			b, errB := DecodeJSON("f.json", data, p)
			checkDecoded(t, a, b, errA, errB, "f.json")
		}
	})
}

func checkDecoded(t *testing.T, a, b Document, errA, errB error, name string) {
	t.Helper()
	if (errA == nil) != (errB == nil) {
		t.Fatalf("decoded once (%v) and not once (%v)", errA, errB)
	}
	if errA == nil {
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("two decodings differ: %+v %+v", a, b)
		}
		_ = a.Check()
		return
	}
	var e *Error
	if !errors.As(errA, &e) || len(e.Problems) == 0 || !strings.HasPrefix(errA.Error(), name) {
		t.Fatalf("error %v (%T) is not an *Error naming %s", errA, errA, name)
	}
	for _, line := range strings.Split(errA.Error(), "\n") {
		if !strings.HasPrefix(line, name) {
			t.Fatalf("error line %q does not name the document", line)
		}
	}
}

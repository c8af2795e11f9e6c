package xfer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport"
	"github.com/xferio/xfer/transport/twin"
	"github.com/xferio/xfer/transport/verbs"
)

// The tests here reflect over every field of Config and of the configs of
// the layers it nests (tcp.Config, verbs.Config), in the spirit of
// quic-go's config_test.go: a field added to any of them without a doc
// comment that states its default, without an entry in configDefaults, or
// without an entry in configInvalid or configAnyValue fails them.

// configField is one leaf field of Config: its path ("RDMA.GIDIndex") and
// the struct field.
type configField struct {
	path  string
	index []int
	field reflect.StructField
	owner reflect.Type // the struct type that declares it
}

// isNestedConfig reports whether a field of type t is a layer's config to
// recurse into, rather than a value (GIDIndex is a struct that parses
// itself from text).
func isNestedConfig(t reflect.Type) bool {
	_, text := reflect.New(t).Interface().(interface{ UnmarshalText([]byte) error })
	return t.Kind() == reflect.Struct && !text
}

// configLeaves lists the leaf fields of t, recursively.
func configLeaves(t reflect.Type, prefix string, index []int) []configField {
	var out []configField
	for i := range t.NumField() {
		f := t.Field(i)
		idx := append(append([]int(nil), index...), i)
		if isNestedConfig(f.Type) {
			out = append(out, configLeaves(f.Type, prefix+f.Name+".", idx)...)
			continue
		}
		out = append(out, configField{path: prefix + f.Name, index: idx, field: f, owner: t})
	}
	return out
}

// configStructs lists Config and the configs it nests.
func configStructs(t reflect.Type) []reflect.Type {
	out := []reflect.Type{t}
	for i := range t.NumField() {
		if f := t.Field(i); isNestedConfig(f.Type) {
			out = append(out, configStructs(f.Type)...)
		}
	}
	return out
}

// nonNil is a configDefaults entry for a field whose default is some
// non-nil value (the Logger).
type nonNil struct{}

// configDefaults is every leaf field with the default Config{}.withDefaults
// gives it. Literal values, not the Default constants, so that changing a
// default is a decision this table (and the README's sample) records.
var configDefaults = map[string]any{
	"Listen":                              "",
	"Advertise":                           "",
	"Directory":                           "p2p",
	"NodeID":                              "",
	"DirectoryTTL":                        10 * time.Second,
	"Transport":                           PolicyAuto,
	"MemoryMB":                            64,
	"HugePages":                           mem.HugeAuto,
	"Memory":                              MemoryAuto,
	"MemoryDevice":                        mem.Host,
	"Secret":                              "",
	"SecretFile":                          "",
	"Security.RequireAuthentication":      false,
	"Security.AllowedPeers":               []string(nil),
	"Security.MaxPendingHandshakes":       256,
	"Security.MaxPendingPerSource":        32,
	"Security.RDMA.AllowedGIDs":           []string(nil),
	"Security.RDMA.RequireAuthentication": false,
	"DirectoryTokenFile":                  "",
	"DirectoryTLSCert":                    "",
	"DirectoryTLSKey":                     "",
	"DirectoryTLSCA":                      "",
	"MaxMessage":                          64 << 10,
	"RecvDepth":                           128,
	"HandshakeTimeout":                    10 * time.Second,
	"OpTimeout":                           10 * time.Second,
	"ReconnectWait":                       2 * time.Second,
	"Logger":                              nonNil{},
	"Metrics":                             nil,
	"ExtraTransport":                      nil,
	"HoldPeers":                           false,

	"TCP.Conns":      5,
	"TCP.PollSpin":   20 * time.Microsecond,
	"TCP.Congestion": "auto",

	"RDMA.Device":          "",
	"RDMA.Devices":         []string(nil),
	"RDMA.Port":            0,
	"RDMA.GIDIndex":        verbs.GIDIndex{},
	"RDMA.MTU":             0,
	"RDMA.MaxInlineData":   64,
	"RDMA.MaxSendWR":       256,
	"RDMA.MaxRecvWR":       256,
	"RDMA.MaxSGE":          1,
	"RDMA.QPType":          verbs.QPTypeRC,
	"RDMA.UseSRQ":          false,
	"RDMA.UseEventChannel": false,
	"RDMA.PollSpin":        50 * time.Microsecond,
	"RDMA.PollIdle":        10 * time.Millisecond,
	"RDMA.PollNap":         time.Duration(0), // stays 0: per device (50µs, none on iWARP)
	"RDMA.UseCM":           false,
	"RDMA.ACKTimeout":      14,
	"RDMA.RetryCnt":        7,
	"RDMA.RNRRetry":        7,
	"RDMA.MinRNRTimer":     12,
	"RDMA.QPsPerPeer":      2,
	"RDMA.SliceSize":       1 << 20,
}

// configInvalid is, for each field that has invalid values, one of them
// (set on a zero Config) and the key its error must name.
var configInvalid = map[string]struct {
	set func(*Config)
	key string
}{
	"Transport":                           {func(c *Config) { c.Transport = "carrier-pigeon" }, `transport "carrier-pigeon"`},
	"Directory":                           {func(c *Config) { c.Directory = "zookeeper://z:2181" }, `directory "zookeeper://z:2181"`},
	"NodeID":                              {func(c *Config) { c.NodeID = "a b" }, `node_id "a b"`},
	"Secret":                              {func(c *Config) { c.Secret = "short" }, "secret: 5 bytes"},
	"Security.RequireAuthentication":      {func(c *Config) { c.Security.RequireAuthentication = true }, "security.require_authentication"},
	"Security.RDMA.RequireAuthentication": {func(c *Config) { c.Security.RDMA.RequireAuthentication = true }, "security.require_authentication"},
	"Security.AllowedPeers":               {func(c *Config) { c.Security.AllowedPeers = []string{"10.0.0.0/33"} }, "security.allowed_peers"},
	"Security.MaxPendingHandshakes":       {func(c *Config) { c.Security.MaxPendingHandshakes = -1 }, "security.max_pending_handshakes -1"},
	"Security.MaxPendingPerSource":        {func(c *Config) { c.Security.MaxPendingHandshakes, c.Security.MaxPendingPerSource = 4, 8 }, "security.max_pending_per_source 8: must not exceed"},
	"Security.RDMA.AllowedGIDs":           {func(c *Config) { c.Security.RDMA.AllowedGIDs = []string{"gid"} }, "security.rdma.allowed_gids"},
	"SecretFile":                          {func(c *Config) { c.SecretFile = "/nonexistent/secret" }, "secret_file"},
	"DirectoryTTL":                        {func(c *Config) { c.DirectoryTTL = time.Millisecond }, "directory_ttl 1ms"},
	"DirectoryTLSCert":                    {func(c *Config) { c.DirectoryTLSCert = "client.pem" }, "directory_tls_cert client.pem: needs its key"},
	"DirectoryTLSKey":                     {func(c *Config) { c.DirectoryTLSKey = "client-key.pem" }, "directory_tls_key client-key.pem: needs its certificate"},
	"MemoryMB":                            {func(c *Config) { c.MemoryMB = -1 }, "memory_mb -1"},
	"HugePages":                           {func(c *Config) { c.HugePages = 7 }, "huge_pages 7"},
	"Memory":                              {func(c *Config) { c.Memory = "sometimes" }, `memory "sometimes"`},
	"MemoryDevice":                        {func(c *Config) { c.MemoryDevice = mem.CUDA(300) }, "memory_device cuda:300"},
	"MaxMessage":                          {func(c *Config) { c.MaxMessage = 1 << 30 }, "max_message 1073741824"},
	"RecvDepth":                           {func(c *Config) { c.RecvDepth = -5 }, "recv_depth -5"},
	"HandshakeTimeout":                    {func(c *Config) { c.HandshakeTimeout = -time.Second }, "handshake_timeout -1s"},
	"OpTimeout":                           {func(c *Config) { c.OpTimeout = time.Millisecond }, "op_timeout 1ms"},

	"TCP.Conns":      {func(c *Config) { c.TCP.Conns = 1000 }, "tcp.conns 1000"},
	"TCP.PollSpin":   {func(c *Config) { c.TCP.PollSpin = 2 * time.Second }, "tcp.poll_spin 2s"},
	"TCP.Congestion": {func(c *Config) { c.TCP.Congestion = "BBR" }, `tcp.congestion "BBR"`},

	"RDMA.Port":          {func(c *Config) { c.RDMA.Port = -1 }, "rdma.port -1"},
	"RDMA.Devices":       {func(c *Config) { c.RDMA.Devices = []string{"auto", "mlx5_0"} }, "rdma.devices"},
	"RDMA.GIDIndex":      {func(c *Config) { c.RDMA.GIDIndex = verbs.GID(300) }, "rdma.gid_index 300: must be auto or 0 to 255"},
	"RDMA.MTU":           {func(c *Config) { c.RDMA.MTU = 1500 }, "rdma.mtu 1500"},
	"RDMA.MaxInlineData": {func(c *Config) { c.RDMA.MaxInlineData = -1 }, "rdma.max_inline_data -1"},
	"RDMA.MaxSendWR":     {func(c *Config) { c.RDMA.MaxSendWR = -1 }, "rdma.max_send_wr -1"},
	"RDMA.MaxRecvWR":     {func(c *Config) { c.RDMA.MaxRecvWR = 1 << 20 }, "rdma.max_recv_wr 1048576"},
	"RDMA.MaxSGE":        {func(c *Config) { c.RDMA.MaxSGE = -1 }, "rdma.max_sge -1"},
	"RDMA.QPType":        {func(c *Config) { c.RDMA.QPType = "UD" }, `rdma.qp_type "UD"`},
	"RDMA.PollSpin":      {func(c *Config) { c.RDMA.PollSpin = time.Hour }, "rdma.poll_spin 1h0m0s"},
	"RDMA.PollIdle":      {func(c *Config) { c.RDMA.PollIdle = time.Hour }, "rdma.poll_idle 1h0m0s"},
	"RDMA.PollNap":       {func(c *Config) { c.RDMA.PollNap = time.Second }, "rdma.poll_nap 1s"},
	"RDMA.ACKTimeout":    {func(c *Config) { c.RDMA.ACKTimeout = 32 }, "rdma.timeout 32"},
	"RDMA.RetryCnt":      {func(c *Config) { c.RDMA.RetryCnt = 8 }, "rdma.retry_cnt 8"},
	"RDMA.RNRRetry":      {func(c *Config) { c.RDMA.RNRRetry = 9 }, "rdma.rnr_retry 9"},
	"RDMA.MinRNRTimer":   {func(c *Config) { c.RDMA.MinRNRTimer = -1 }, "rdma.min_rnr_timer -1"},
	"RDMA.QPsPerPeer":    {func(c *Config) { c.RDMA.QPsPerPeer = -1 }, "QPsPerPeer -1"},
	"RDMA.SliceSize":     {func(c *Config) { c.RDMA.SliceSize = -1 }, "SliceSize -1"},
}

// configAnyValue lists the fields that every value of their type is valid
// for (an address or device name is checked when it is used).
var configAnyValue = map[string]bool{
	"Listen": true, "Advertise": true, "ReconnectWait": true, "DirectoryTokenFile": true, "DirectoryTLSCA": true, "Logger": true, "Metrics": true, "ExtraTransport": true, "HoldPeers": true,
	"RDMA.Device": true, "RDMA.UseSRQ": true, "RDMA.UseEventChannel": true, "RDMA.UseCM": true,
}

func TestConfigDefaultsCoverEveryField(t *testing.T) {
	got, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(got)
	seen := map[string]bool{}
	for _, f := range configLeaves(reflect.TypeFor[Config](), "", nil) {
		seen[f.path] = true
		want, ok := configDefaults[f.path]
		if !ok {
			t.Errorf("Config.%s: no entry in configDefaults: give the field a default (zero means it) and list it", f.path)
			continue
		}
		fv := v.FieldByIndex(f.index)
		if _, ok := want.(nonNil); ok {
			if fv.IsNil() {
				t.Errorf("Config.%s: the default is nil", f.path)
			}
			continue
		}
		if want == nil && fv.Kind() == reflect.Func {
			if !fv.IsNil() {
				t.Errorf("Config.%s: the default is not nil", f.path)
			}
			continue
		}
		if !reflect.DeepEqual(fv.Interface(), want) {
			t.Errorf("Config.%s: default %v, want %v", f.path, fv.Interface(), want)
		}
	}
	for path := range configDefaults {
		if !seen[path] {
			t.Errorf("configDefaults lists %s, which is not a field", path)
		}
	}
	again, err := got.withDefaults()
	if err != nil || !reflect.DeepEqual(again.Clone(), got.Clone()) {
		t.Errorf("defaults are not idempotent: %+v, %v", again, err)
	}
}

// Every validation error names its key; every field either has an invalid
// value in configInvalid or is listed in configAnyValue.
func TestConfigErrorsNameTheKey(t *testing.T) {
	fields := map[string]bool{}
	for _, f := range configLeaves(reflect.TypeFor[Config](), "", nil) {
		fields[f.path] = true
		_, bad := configInvalid[f.path]
		switch {
		case !bad && !configAnyValue[f.path]:
			t.Errorf("Config.%s: no entry in configInvalid (an invalid value and the key its error names) or configAnyValue", f.path)
		case bad && configAnyValue[f.path]:
			t.Errorf("Config.%s: in both configInvalid and configAnyValue", f.path)
		}
	}
	for path, tc := range configInvalid {
		if !fields[path] {
			t.Errorf("configInvalid lists %s, which is not a field", path)
			continue
		}
		var c Config
		tc.set(&c)
		_, err := c.withDefaults()
		if err == nil || !strings.HasPrefix(err.Error(), "config: ") || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("Config.%s: error %v, want \"config: ...%s...\"", path, err, tc.key)
		}
	}
	for path := range configAnyValue {
		if !fields[path] {
			t.Errorf("configAnyValue lists %s, which is not a field", path)
		}
	}
}

// Every field of every layer's Config has a doc comment that states its
// default.
func TestConfigFieldsDocumented(t *testing.T) {
	const module = "github.com/xferio/xfer"
	for _, typ := range configStructs(reflect.TypeFor[Config]()) {
		rel, ok := strings.CutPrefix(typ.PkgPath(), module)
		if !ok {
			t.Errorf("%s is not in this module", typ)
			continue
		}
		dir := "." + rel
		docs := structFieldDocs(t, dir, typ.Name())
		if docs == nil {
			t.Errorf("%s: type %s not found in %s", typ, typ.Name(), dir)
			continue
		}
		for i := range typ.NumField() {
			name := typ.Field(i).Name
			doc := docs[name]
			switch {
			case strings.TrimSpace(doc) == "":
				t.Errorf("%s.%s has no doc comment", typ, name)
			case !strings.Contains(doc, "Default"):
				t.Errorf("%s.%s: its doc comment does not state the default (\"Default: ...\"): %q", typ, name, doc)
			}
		}
	}
}

// structFieldDocs parses the non-test Go files in dir and returns the doc
// comment (or line comment) of each field of the struct type name.
func structFieldDocs(t *testing.T, dir, name string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || ts.Name.Name != name {
					continue
				}
				docs := map[string]string{}
				for _, field := range st.Fields.List {
					doc := field.Doc.Text() + field.Comment.Text()
					for _, n := range field.Names {
						docs[n.Name] = doc
					}
				}
				return docs
			}
		}
	}
	return nil
}

// Clone copies every layer: changing any field of the clone leaves the
// original alone, and no field of reference kind (pointer, slice, map) is
// shared except the Logger, which is documented as shared.
func TestConfigClone(t *testing.T) {
	samples := map[reflect.Type][2]any{ // two distinct non-zero values per type
		reflect.TypeFor[string]():                {"a", "b"},
		reflect.TypeFor[int]():                   {1, 2},
		reflect.TypeFor[bool]():                  {true, false},
		reflect.TypeFor[[]string]():              {[]string{"10.0.0.0/8"}, []string{"fe80::1"}},
		reflect.TypeFor[time.Duration]():         {time.Second, time.Minute},
		reflect.TypeFor[Policy]():                {PolicyTCP, PolicySHM},
		reflect.TypeFor[MemoryBacking]():         {MemoryMemfd, MemoryPrivate},
		reflect.TypeFor[mem.HugePages]():         {mem.HugeOff, mem.HugeExplicit},
		reflect.TypeFor[mem.Location]():          {mem.CUDA(0), mem.CUDA(1)},
		reflect.TypeFor[verbs.GIDIndex]():        {verbs.GID(1), verbs.GID(2)},
		reflect.TypeFor[verbs.QPType]():          {verbs.QPTypeRC, verbs.QPType("rc")},
		reflect.TypeFor[*slog.Logger]():          {slog.New(slog.NewTextHandler(os.Stderr, nil)), slog.New(slog.NewTextHandler(os.Stdout, nil))},
		reflect.TypeFor[prometheus.Registerer](): {prometheus.NewRegistry(), prometheus.NewRegistry()},
		reflect.TypeFor[func() transport.Transport](): {
			func() transport.Transport { return twin.New() }, func() transport.Transport { return nil }},
	}
	leaves := configLeaves(reflect.TypeFor[Config](), "", nil)
	var orig Config
	ov := reflect.ValueOf(&orig).Elem()
	for _, f := range leaves {
		s, ok := samples[f.field.Type]
		if !ok {
			t.Fatalf("Config.%s: add two sample values of %s to this test", f.path, f.field.Type)
		}
		ov.FieldByIndex(f.index).Set(reflect.ValueOf(s[0]))
	}
	want := orig.Clone() // compared field by field below, before the clone changes
	c := orig.Clone()
	cv := reflect.ValueOf(&c).Elem()
	for _, f := range leaves {
		fv := cv.FieldByIndex(f.index)
		switch fv.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			if f.path != "Logger" && fv.Pointer() == ov.FieldByIndex(f.index).Pointer() {
				t.Errorf("Config.%s: the clone shares it with the original; copy it in Clone", f.path)
			}
		}
		fv.Set(reflect.ValueOf(samples[f.field.Type][1]))
	}
	for _, f := range leaves {
		gv, wv := ov.FieldByIndex(f.index), reflect.ValueOf(want).FieldByIndex(f.index)
		got, w := gv.Interface(), wv.Interface()
		if gv.Kind() == reflect.Func && gv.Pointer() == wv.Pointer() {
			continue // funcs are equal only to nil under DeepEqual
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("Config.%s: changing the clone changed the original to %v", f.path, got)
		}
	}
}

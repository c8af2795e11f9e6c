package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/config/configtest"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport/tcp"
	"github.com/xferio/xfer/transport/verbs"
)

// decodeFile decodes text as the xfer command's file xfer.yaml.
func decodeFile(text string) (Document, error) {
	return DecodeYAML("xfer.yaml", []byte(text), Command)
}

func TestFile(t *testing.T) {
	doc, err := decodeFile(configtest.Full)
	if err != nil {
		t.Fatal(err)
	}
	want := Document{
		Engine:        configtest.FullEngine(),
		LogLevel:      "info",
		LogFormat:     "json",
		MetricsListen: "127.0.0.1:9464",
	}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("got  %+v\nwant %+v", doc, want)
	}
	if err := doc.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

func TestEmpty(t *testing.T) {
	for _, text := range []string{"", "# nothing\n", "---\n", "null\n"} {
		doc, err := decodeFile(text)
		if err != nil || !reflect.DeepEqual(doc, Document{}) {
			t.Errorf("%q: got %+v, %v; want the zero Document", text, doc, err)
		}
	}
}

func TestBadValue(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"memory_mb: abc\n", `xfer.yaml:1: memory_mb: "abc": not an integer`},
		{"listen: :0\ntransport: foo\n", `xfer.yaml:2: transport: "foo": not one of auto, rdma, shm, tcp`},
		{"handshake_timeout: 5\n", `handshake_timeout: "5": not a duration`},
		{"handshake_timeout: soon\n", `handshake_timeout: "soon": not a duration`},
		{"conns: [1, 2]\n", "xfer.yaml:1: conns: expected a single value"},
		{"conns: 99999999999999999999\n", "conns: \"99999999999999999999\": integer out of range"},
		{"- listen\n", "xfer.yaml:1: expected a mapping"},
		{"conns: 1\nconns: 2\n", `xfer.yaml:2: key "conns" repeats the one on line 1`},
		{"listen: :0\nmemory_mb: [\n", "xfer.yaml:"}, // YAML syntax error
		{"log_level: loud\n", `xfer.yaml:1: log_level: "loud": must be debug, info, warn or error`},
		{"log_format: xml\n", `xfer.yaml:1: log_format: "xml": must be text or json`},
		{"log_format: [json]\n", `log_format: expected a single value`},
		{"log_level: info\nlog_level: debug\n", `key "log_level" repeats the one on line 1`},
		{"anchor: &a 1\nconns: *a\n", "conns: expected a single value"},
	} {
		_, err := decodeFile(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, tc := range []struct {
		text string
		want time.Duration
	}{
		{"handshake_timeout: 5s\n", 5 * time.Second},
		{"handshake_timeout: 250ms\n", 250 * time.Millisecond},
		{"handshake_timeout: \"1m30s\"\n", 90 * time.Second},
		{"handshake_timeout:\n", 0},
	} {
		doc, err := decodeFile(tc.text)
		if err != nil || doc.Engine.HandshakeTimeout != tc.want {
			t.Errorf("%q: got %v, %v; want %v", tc.text, doc.Engine.HandshakeTimeout, err, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	doc, err := ReadFile("testdata/production.yaml", Command)
	if err != nil || doc.Engine.RDMA.Device != "mlx5_0" {
		t.Errorf("ReadFile: %+v, %v", doc, err)
	}
	_, err = ReadFile("testdata/nope.yaml", Command)
	if err == nil || !strings.Contains(err.Error(), "testdata/nope.yaml") {
		t.Errorf("a missing file: error %v, want one naming it", err)
	}
}

// TestEveryField makes sure every yaml key of xfer.Config, and of the
// configs it nests, can be set from text, so that a new field cannot be
// silently unconfigurable; and every key of every program can be set.
func TestEveryField(t *testing.T) {
	samples := map[reflect.Kind]string{reflect.String: "x", reflect.Int: "3", reflect.Int64: "3s", reflect.Bool: "true", reflect.Slice: "fe80::1,10.0.0.0/8"}
	// Types that parse themselves: a value that is not their zero.
	textSamples := map[reflect.Type]string{
		policyType:                            "tcp",
		hugePagesType:                         "off",
		reflect.TypeFor[xfer.MemoryBacking](): "memfd",
		reflect.TypeFor[mem.Location]():       "cuda:1",
		reflect.TypeFor[verbs.GIDIndex]():     "0",
		reflect.TypeFor[verbs.QPType]():       "rc",
	}
	var check func(typ reflect.Type, name string)
	check = func(typ reflect.Type, name string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			switch tag := f.Tag.Get("yaml"); {
			case tag == "":
				t.Errorf("%s.%s has no yaml tag (use `yaml:\"-\"` to leave it out)", name, f.Name)
			case tag != "-" && isSection(f.Type):
				check(f.Type, f.Type.String())
			}
		}
	}
	check(reflect.TypeFor[xfer.Config](), "xfer.Config")
	n := 0
	for _, k := range table() {
		var doc Document
		if !k.IsEngine() {
			other := map[string]string{"log_level": "debug", "log_format": "json", "metrics_listen": ":9464", "web_config_file": "/etc/xfer/web.yml", "role": "producer",
				"producer": "h:1", "ttl_seconds": "1.5", "pull": "read", "chunk_size": "5", "wait_for_memory": "true",
				"wait_spin": "50us", "call_timeout": "30s", "kv.disk_dir": "/var/cache/xfer", "kv.disk_size": "64GiB"}
			s, ok := other[k.Name]
			if !ok {
				t.Errorf("key %s: add a sample value", k.Name)
				continue
			}
			if err := k.Set(&doc, s); err != nil || reflect.DeepEqual(doc, Document{}) {
				t.Errorf("key %s: setting %q: %v, %+v", k.Name, s, err, doc)
			}
			continue
		}
		n++
		v := reflect.ValueOf(&doc.Engine).Elem().FieldByIndex(k.index)
		s, ok := textSamples[v.Type()]
		if !ok {
			if reflect.PointerTo(v.Type()).Implements(textUnmarshalerType) {
				t.Errorf("key %s (%s): add a sample value to textSamples", k.Name, v.Type())
				continue
			}
			s = samples[v.Kind()]
		}
		if err := k.Set(&doc, s); err != nil {
			t.Errorf("key %s (%s): %v", k.Name, v.Type(), err)
		}
		if v.IsZero() {
			t.Errorf("key %s: setting %q left it zero", k.Name, s)
		}
	}
	if n < 20 {
		t.Errorf("only %d engine keys: the table is broken", n)
	}
}

// Every nested config of xfer.Config is a section, with its top-level
// prefix, and so is the command's kv section; no top-level key collides
// with another, in any program.
func TestSections(t *testing.T) {
	typ := reflect.TypeFor[xfer.Config]()
	var want []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if key := yamlKey(f); key != "" && isSection(f.Type) {
			want = append(want, key)
		}
	}
	want = append(want, "kv") // the KV server's disk tier (kv.disk_dir, kv.disk_size)
	if got := Sections(); !reflect.DeepEqual(got, want) || !slices.Contains(got, "tcp") || !slices.Contains(got, "rdma") {
		t.Errorf("Sections() = %v, want xfer.Config's nested configs %v", got, want)
	}
	for section, prefix := range map[string]string{"tcp": "", "rdma": "rdma_", "future": "future_"} {
		if got := flatPrefix(section); got != prefix {
			t.Errorf("flatPrefix(%s) = %q, want %q", section, got, prefix)
		}
	}
	for section := range flatPrefixes {
		if !slices.Contains(want, section) {
			t.Errorf("flatPrefixes names %s, which is no nested config of xfer.Config", section)
		}
	}
	for _, p := range []Program{Command, Library} {
		flat := map[string]string{}
		for _, k := range Keys(p) {
			if other, dup := flat[k.Flat]; dup {
				t.Errorf("%v: top-level key %s names both %s and %s", p, k.Flat, other, k.Name)
			}
			if isSectionName(k.Flat) {
				t.Errorf("%v: top-level key %s is a section's name", p, k.Flat)
			}
			flat[k.Flat] = k.Name
		}
	}
	if k, ok := Lookup(Command, "conns"); !ok || k.Name != "tcp.conns" || strings.Join(k.Env(), ",") != "XFER_CONNS,XFER_TCP_CONNS" || k.Flag() != "conns" {
		t.Errorf("Lookup(conns) = %+v, %v", k, ok)
	}
	if k, ok := Lookup(Command, "rdma.gid_index"); !ok || strings.Join(k.Env(), ",") != "XFER_RDMA_GID_INDEX" || k.Flag() != "rdma-gid-index" {
		t.Errorf("Lookup(rdma.gid_index) = %+v, %v", k, ok)
	}
	if _, ok := Lookup(Command, "role"); ok {
		t.Error("role is a key of the command's file")
	}
	if _, ok := Lookup(Library, "metrics_listen"); ok {
		t.Error("metrics_listen is a key of the library's document")
	}
}

// Every option a file could set before the layers had configs of their own
// still works at the top level with the same key, and sets the same field
// as its key in the nested form.
func TestFlatAndNested(t *testing.T) {
	flat := `listen: :0
conns: 2
poll_spin: 7us
rdma_device: rxe0
rdma_port: 1
rdma_gid_index: 1
rdma_mtu: 1024
rdma_max_inline_data: 32
rdma_max_send_wr: 128
rdma_max_recv_wr: 64
rdma_max_sge: 2
rdma_qp_type: RC
rdma_use_srq: true
rdma_use_event_channel: true
rdma_poll_spin: 30us
rdma_poll_idle: 5ms
rdma_use_cm: true
`
	nested := `listen: :0
tcp:
  conns: 2
  poll_spin: 7us
rdma:
  device: rxe0
  port: 1
  gid_index: 1
  mtu: 1024
  max_inline_data: 32
  max_send_wr: 128
  max_recv_wr: 64
  max_sge: 2
  qp_type: rc
  use_srq: true
  use_event_channel: true
  poll_spin: 30us
  poll_idle: 5ms
  use_cm: true
`
	want := xfer.Config{
		Listen: ":0",
		TCP:    tcp.Config{Conns: 2, PollSpin: 7 * time.Microsecond},
		RDMA: verbs.Config{Device: "rxe0", Port: 1, GIDIndex: verbs.GID(1), MTU: 1024, MaxInlineData: 32,
			MaxSendWR: 128, MaxRecvWR: 64, MaxSGE: 2, QPType: verbs.QPTypeRC, UseSRQ: true, UseEventChannel: true,
			PollSpin: 30 * time.Microsecond, PollIdle: 5 * time.Millisecond, UseCM: true},
	}
	for name, text := range map[string]string{"flat": flat, "nested": nested} {
		doc, err := decodeFile(text)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(doc.Engine, want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", name, doc.Engine, want)
		}
	}
	// Both forms in one file, for different options; an empty mapping.
	doc, err := decodeFile("rdma_device: rxe0\nrdma:\n  gid_index: auto\n  mtu: 2048\ntcp:\nconns: 1\n")
	if err != nil {
		t.Fatal(err)
	}
	if c := doc.Engine; c.RDMA.Device != "rxe0" || c.RDMA.MTU != 2048 || c.RDMA.GIDIndex != (verbs.GIDIndex{}) || c.TCP.Conns != 1 {
		t.Errorf("mixed forms: %+v", c)
	}
	// Several devices (rails): a sequence, in either form.
	for _, text := range []string{"rdma:\n  devices: [mlx5_0, mlx5_1]\n", "rdma_devices:\n  - mlx5_0\n  - mlx5_1\n"} {
		doc, err := decodeFile(text)
		if err != nil || !slices.Equal(doc.Engine.RDMA.Devices, []string{"mlx5_0", "mlx5_1"}) {
			t.Errorf("%q: devices %q, %v", text, doc.Engine.RDMA.Devices, err)
		}
	}
}

// The same option set both ways in one file is an error that names both
// keys and both lines.
func TestBothForms(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"rdma_device: rxe0\nrdma:\n  device: siw0\n", `xfer.yaml:3: key "rdma.device" sets the same option as "rdma_device" on line 1`},
		{"tcp:\n  conns: 2\nconns: 3\n", `xfer.yaml:3: key "conns" sets the same option as "tcp.conns" on line 2`},
		{"rdma:\n  mtu: 1024\nrdma:\n  port: 1\n", `xfer.yaml:3: key "rdma" repeats the one on line 1`},
		{"rdma:\n  mtu: 1024\n  mtu: 2048\n", `xfer.yaml:3: key "rdma.mtu" repeats the one on line 2`},
	} {
		_, err := decodeFile(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrDuplicate) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestNestedErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"rdma:\n  gid_index: 300\n", `xfer.yaml:2: rdma.gid_index: "300": must be auto or 0 to 255`},
		{"rdma_gid_index: first\n", `xfer.yaml:1: rdma_gid_index: "first": must be auto or 0 to 255`},
		{"rdma:\n  qp_type: UD\n", `xfer.yaml:2: rdma.qp_type: "UD": only RC is supported`},
		{"rdma:\n  use_event_channel: sometimes\n", `xfer.yaml:2: rdma.use_event_channel: "sometimes": not true or false`},
		{"tcp:\n  poll_spin: 20\n", `xfer.yaml:2: tcp.poll_spin: "20": not a duration`},
		{"rdma:\n  devcie: rxe0\n", `xfer.yaml:2: unknown key "devcie" in rdma: did you mean device?`},
		{"rdma:\n  flavour: rxe0\n", `xfer.yaml:2: unknown key "flavour" in rdma: (known keys: device, devices, port,`},
		{"rdma: rxe0\n", `xfer.yaml:1: rdma: expected a mapping of keys (device, devices, port,`},
		{"tcp:\n  conns: [1]\n", "xfer.yaml:2: tcp.conns: expected a single value"},
		{"huge_pages: sometimes\n", `xfer.yaml:1: huge_pages: "sometimes": not one of auto, off, explicit`},
		{"memory: disk\n", `xfer.yaml:1: memory: "disk": must be auto, memfd, private or cuda:N (GPU memory)`},
		{"tcp.conns: 2\n", `xfer.yaml:1: unknown key "tcp.conns": write tcp: {conns: ...}, or conns at the top level`},
	} {
		_, err := decodeFile(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

// One error names every unknown key, each with its line, and the values
// that are wrong besides; each problem says what kind it is.
func TestAllProblemsAtOnce(t *testing.T) {
	text := "listen: :0\nmemroy_mb: 64\nconns: 2\nflavour: vanilla\nrdma:\n  devcie: rxe0\n  mtu: lots\ncolour: blue\n"
	_, err := decodeFile(text)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want an *Error", err, err)
	}
	want := []struct {
		line int
		key  string
		kind error
		text string
	}{
		{2, "memroy_mb", ErrUnknownKey, `xfer.yaml:2: unknown key "memroy_mb": did you mean memory_mb?`},
		{4, "flavour", ErrUnknownKey, `xfer.yaml:4: unknown key "flavour": (known keys: listen, advertise,`},
		{6, "rdma.devcie", ErrUnknownKey, `xfer.yaml:6: unknown key "devcie" in rdma: did you mean device?`},
		{7, "rdma.mtu", ErrBadValue, `xfer.yaml:7: rdma.mtu: "lots": not an integer`},
		{8, "colour", ErrUnknownKey, `xfer.yaml:8: unknown key "colour": (see the known keys above)`},
	}
	if len(e.Problems) != len(want) || e.File != "xfer.yaml" {
		t.Fatalf("problems of %s:\n%v\nwant %d", e.File, err, len(want))
	}
	lines := strings.Split(err.Error(), "\n")
	for i, w := range want {
		p := e.Problems[i]
		if p.Line != w.line || p.Key != w.key || !errors.Is(p.Err, w.kind) || !strings.HasPrefix(lines[i], w.text) {
			t.Errorf("problem %d: line %d key %q %q; want line %d key %q %q (%v)", i, p.Line, p.Key, lines[i], w.line, w.key, w.text, w.kind)
		}
	}
	if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrBadValue) || errors.Is(err, ErrSyntax) {
		t.Errorf("errors.Is on %v", err)
	}
}

// A key in the wrong place says where it belongs.
func TestHints(t *testing.T) {
	for _, tc := range []struct {
		prog       Program
		text, want string
	}{
		{Command, "dwcp:\n  log_level: info\n  colour: blue\n",
			`xfer.yaml:1: unknown key "dwcp": dwcp.log_level (line 2): log_level is a top-level key: write it at the top level`},
		{Command, "dwcp:\n  conns: 2\n  rdma_device: x\n",
			`unknown key "dwcp": dwcp.conns (line 2): conns is a top-level key (the same option as tcp.conns): write it at the top level; dwcp.rdma_device (line 3): rdma_device is a top-level key`},
		{Command, "rdma:\n  log_level: info\n", `xfer.yaml:2: unknown key "log_level" in rdma: log_level is a top-level key: write it at the top level`},
		{Command, "rdma:\n  conns: 2\n", `xfer.yaml:2: unknown key "conns" in rdma: conns is a top-level key (the same option as tcp.conns)`},
		{Command, "rdma:\n  rdma_device: rxe0\n", `unknown key "rdma_device" in rdma: did you mean device? (rdma_device is its name at the top level)`},
		{Command, "tcp:\n  rdma:\n    device: x\n", `unknown key "rdma" in tcp: rdma is a top-level mapping`},
		{Command, "gid_index: 1\n", `xfer.yaml:1: unknown key "gid_index": it belongs in rdma: {gid_index: ...}, or rdma_gid_index at the top level`},
		{Command, "use_cm: true\n", `it belongs in rdma: {use_cm: ...}, or rdma_use_cm at the top level`},
		{Command, "poll_spin: 1us\nrdma:\n  poll_spin: 2us\n", ``}, // tcp's flat key, and rdma's nested one: both known
		{Command, "device: rxe0\n", `unknown key "device": it belongs in rdma: {device: ...}, or rdma_device at the top level`},
		{Command, "role: producer\n", `unknown key "role": role is a key of the connector's configuration (libxfer), not of the xfer command's config file`},
		{Library, "metrics_listen: :9464\n", `unknown key "metrics_listen": metrics_listen is a key of the xfer command's config file, not of the connector's configuration (libxfer)`},
		{Command, "transport:\n  amst:\n    log_level: info\n", `xfer.yaml:3: unknown key "log_level" in transport.amst: log_level is a top-level key`},
		{Command, "transport:\n  amst:\n    rdma_devcie: mlx5_0\n", `unknown key "rdma_devcie" in transport.amst: did you mean rdma_device?`},
		{Command, "transport:\n  amst:\n    colour: blue\n", `unknown key "colour" in transport.amst: (known keys: enable_rdma, rdma_send_buffer_mb, rdma_recv_buffer_mb, rdma_device,`},
	} {
		_, err := DecodeYAML("xfer.yaml", []byte(tc.text), tc.prog)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.text, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\nerror %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		doc  Document
		want string
	}{
		{Document{}, ""},
		{Document{Engine: xfer.Config{MemoryMB: -1}}, "config: memory_mb -1"},
		{Document{Engine: xfer.Config{RDMA: verbs.Config{MTU: 9000}}}, "rdma.mtu 9000"},
		{Document{LogLevel: "loud"}, `config: log_level "loud"`},
		{Document{LogFormat: "xml"}, `config: log_format "xml"`},
		{Document{ChunkSize: -1}, "config: chunk_size -1"},
	} {
		err := tc.doc.Check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Check() = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"memory_mb", "max_message", "listen"}
	for in, want := range map[string]string{"memroy_mb": "memory_mb", "lisen": "listen", "colour": "", "": ""} {
		if got := Suggest(in, names); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// The KV server's disk tier keys: a kv mapping, or kv_ keys at the top
// level; sizes as the flags take them.
func TestKVDiskKeys(t *testing.T) {
	for _, in := range []string{"kv:\n  disk_dir: /var/cache/xfer\n  disk_size: 2GiB\n", "kv_disk_dir: /var/cache/xfer\nkv_disk_size: 2GiB\n"} {
		d, err := DecodeYAML("x.yaml", []byte(in), Command)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if d.KVDiskDir != "/var/cache/xfer" || d.KVDiskSize != 2<<30 {
			t.Errorf("%q: %q %d", in, d.KVDiskDir, d.KVDiskSize)
		}
	}
	if _, err := DecodeYAML("x.yaml", []byte("kv: {disk_size: lots}\n"), Command); err == nil {
		t.Error("a size that is not one: no error")
	}
	if _, err := DecodeJSON("x.json", []byte(`{"kv": {"disk_dir": "/x"}}`), Library); err == nil {
		t.Error("kv.disk_dir in the connector's configuration: no error")
	}
}

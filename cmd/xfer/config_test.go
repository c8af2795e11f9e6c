package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/mem"
	"github.com/xferio/xfer/transport/tcp"
	"github.com/xferio/xfer/transport/verbs"
)

// writeConfig writes a config file into a temporary directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "xfer.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// env returns a lookup function over a fixed set of variables.
func env(kv ...string) func(string) (string, bool) {
	m := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// serveFlags returns serve's flag set after parsing args.
func serveFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := newServeCmd(&globals{}).Flags()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

const fullConfig = `# every key
listen: 127.0.0.1:7471
advertise: host.example:7471
transport: shm
memory_mb: 256
huge_pages: "off"
secret: s3cret
conns: 4
max_message: 1048576
recv_depth: 64
handshake_timeout: 5s
`

func TestConfigFileOnly(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, fullConfig), env(), serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	want := xfer.Config{
		Listen:           "127.0.0.1:7471",
		Advertise:        "host.example:7471",
		Transport:        xfer.PolicySHM,
		MemoryMB:         256,
		HugePages:        mem.HugeOff,
		Secret:           "s3cret",
		TCP:              tcp.Config{Conns: 4},
		MaxMessage:       1 << 20,
		RecvDepth:        64,
		HandshakeTimeout: 5 * time.Second,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestConfigNoFile(t *testing.T) {
	cfg, err := loadConfig("", env(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, xfer.Config{}) {
		t.Errorf("got %+v, want the zero Config", cfg)
	}
}

func TestConfigEmptyFile(t *testing.T) {
	for _, text := range []string{"", "# nothing\n", "---\n"} {
		cfg, err := loadConfig(writeConfig(t, text), env(), nil)
		if err != nil || !reflect.DeepEqual(cfg, xfer.Config{}) {
			t.Errorf("%q: got %+v, %v; want the zero Config", text, cfg, err)
		}
	}
}

func TestConfigEnvOverridesFile(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, fullConfig), env(
		"XFER_MEMORY_MB", "512",
		"XFER_TRANSPORT", "TCP",
		"XFER_SECRET", "other",
		"XFER_LISTEN", ":0",
		"XFER_HANDSHAKE_TIMEOUT", "1m30s",
		"XFER_CONNS", "", // empty means unset
		"XFER_NO_SUCH_KEY", "ignored",
	), serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MemoryMB != 512 || cfg.Transport != xfer.PolicyTCP || cfg.Secret != "other" || cfg.Listen != ":0" ||
		cfg.HandshakeTimeout != 90*time.Second {
		t.Errorf("environment did not override the file: %+v", cfg)
	}
	if cfg.TCP.Conns != 4 || cfg.Advertise != "host.example:7471" {
		t.Errorf("keys without a variable lost their file value: %+v", cfg)
	}
}

func TestConfigFlagOverridesEnv(t *testing.T) {
	e := env("XFER_MEMORY_MB", "512", "XFER_TRANSPORT", "tcp", "XFER_SECRET", "env")
	cfg, err := loadConfig(writeConfig(t, fullConfig), e, serveFlags(t, "--memory-mb", "1024", "--transport", "rdma"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MemoryMB != 1024 || cfg.Transport != xfer.PolicyRDMA {
		t.Errorf("flags did not override the environment: %+v", cfg)
	}
	if cfg.Secret != "env" {
		t.Errorf("secret = %q: an unset flag overrode the environment", cfg.Secret)
	}
	if cfg.MaxMessage != 1<<20 {
		t.Errorf("max_message = %d: an unset flag (with a default) overrode the file", cfg.MaxMessage)
	}
}

func TestConfigUnknownKey(t *testing.T) {
	_, err := loadConfig(writeConfig(t, "listen: :0\nmemroy_mb: 64\n"), env(), nil)
	if err == nil {
		t.Fatal("no error for an unknown key")
	}
	for _, want := range []string{"xfer.yaml:2", `"memroy_mb"`, "memory_mb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestConfigBadValue(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"memory_mb: abc\n", `xfer.yaml:1: memory_mb: "abc": not an integer`},
		{"listen: :0\ntransport: foo\n", `xfer.yaml:2: transport: "foo": not one of auto, tcp, shm, rdma`},
		{"handshake_timeout: 5\n", `handshake_timeout: "5": not a duration`},
		{"handshake_timeout: soon\n", `handshake_timeout: "soon": not a duration`},
		{"conns: [1, 2]\n", "conns: expected a single value"},
		{"conns: 99999999999999999999\n", "conns: \"99999999999999999999\": integer out of range"},
		{"- listen\n", "expected a mapping"},
		{"conns: 1\nconns: 2\n", `xfer.yaml:2: key "conns" repeats the one on line 1`},
		{"listen: [\n", "xfer.yaml"}, // YAML syntax error
	} {
		_, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestConfigBadEnv(t *testing.T) {
	for _, tc := range []struct{ k, v, want string }{
		{"XFER_MEMORY_MB", "abc", `XFER_MEMORY_MB="abc": not an integer`},
		{"XFER_TRANSPORT", "foo", `XFER_TRANSPORT="foo": not one of auto, tcp, shm, rdma`},
		{"XFER_HANDSHAKE_TIMEOUT", "5", `XFER_HANDSHAKE_TIMEOUT="5": not a duration`},
	} {
		_, err := loadConfig("", env(tc.k, tc.v), nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s=%q: error %v, want %q", tc.k, tc.v, err, tc.want)
		}
	}
}

func TestConfigBadFlag(t *testing.T) {
	_, err := loadConfig("", env(), serveFlags(t, "--transport", "foo"))
	if err == nil || !strings.Contains(err.Error(), `--transport="foo": not one of`) {
		t.Errorf("error %v, want one naming --transport", err)
	}
}

func TestConfigDurations(t *testing.T) {
	for _, tc := range []struct {
		text string
		want time.Duration
	}{
		{"handshake_timeout: 5s\n", 5 * time.Second},
		{"handshake_timeout: 250ms\n", 250 * time.Millisecond},
		{"handshake_timeout: \"1m30s\"\n", 90 * time.Second},
		{"handshake_timeout:\n", 0},
	} {
		cfg, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if err != nil || cfg.HandshakeTimeout != tc.want {
			t.Errorf("%q: got %v, %v; want %v", tc.text, cfg.HandshakeTimeout, err, tc.want)
		}
	}
	cfg, err := loadConfig("", env("XFER_HANDSHAKE_TIMEOUT", "2s"), nil)
	if err != nil || cfg.HandshakeTimeout != 2*time.Second {
		t.Errorf("XFER_HANDSHAKE_TIMEOUT=2s: got %v, %v", cfg.HandshakeTimeout, err)
	}
}

func TestConfigMissingFile(t *testing.T) {
	_, err := loadConfig(filepath.Join(t.TempDir(), "nope.yaml"), env(), nil)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("error %v, want one naming the file", err)
	}
}

// TestConfigEveryField makes sure every yaml key of xfer.Config, and of the
// configs it nests, can be set from text, so that a new field cannot be
// silently unconfigurable.
func TestConfigEveryField(t *testing.T) {
	samples := map[reflect.Kind]string{reflect.String: "x", reflect.Int: "3", reflect.Int64: "3s", reflect.Bool: "true"}
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
	keys := map[string]bool{}
	for _, f := range configFields() {
		for _, k := range []string{f.key, f.flat} {
			if keys[k] && k != f.key {
				t.Errorf("key %s is used twice", k)
			}
		}
		keys[f.key], keys[f.flat] = true, true
		var cfg xfer.Config
		v := reflect.ValueOf(&cfg).Elem().FieldByIndex(f.index)
		s, ok := textSamples[v.Type()]
		if !ok {
			if reflect.PointerTo(v.Type()).Implements(textUnmarshalerType) {
				t.Errorf("key %s (%s): add a sample value to textSamples", f.key, v.Type())
				continue
			}
			s = samples[v.Kind()]
		}
		if err := setField(v, s); err != nil {
			t.Errorf("key %s (%s): %v", f.key, v.Type(), err)
		}
		if v.IsZero() {
			t.Errorf("key %s: setting %q left it zero", f.key, s)
		}
	}
}

// Every option a file could set before the layers had configs of their own
// still works at the top level with the same key, and sets the same field
// as its key in the nested form.
func TestConfigFlatAndNested(t *testing.T) {
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
		cfg, err := loadConfig(writeConfig(t, text), env(), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(cfg, want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", name, cfg, want)
		}
	}
	// Both forms in one file, for different options; an empty mapping.
	cfg, err := loadConfig(writeConfig(t, "rdma_device: rxe0\nrdma:\n  gid_index: auto\n  mtu: 2048\ntcp:\nconns: 1\n"), env(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RDMA.Device != "rxe0" || cfg.RDMA.MTU != 2048 || cfg.RDMA.GIDIndex != (verbs.GIDIndex{}) || cfg.TCP.Conns != 1 {
		t.Errorf("mixed forms: %+v", cfg)
	}
}

// The same option set both ways in one file is an error that names both
// keys and both lines.
func TestConfigBothForms(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"rdma_device: rxe0\nrdma:\n  device: siw0\n", `xfer.yaml:3: key "rdma.device" sets the same option as "rdma_device" on line 1`},
		{"tcp:\n  conns: 2\nconns: 3\n", `xfer.yaml:3: key "conns" sets the same option as "tcp.conns" on line 2`},
		{"rdma:\n  mtu: 1024\nrdma:\n  port: 1\n", `xfer.yaml:3: key "rdma" repeats the one on line 1`},
		{"rdma:\n  mtu: 1024\n  mtu: 2048\n", `xfer.yaml:3: key "rdma.mtu" repeats the one on line 2`},
	} {
		_, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestConfigNestedErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"rdma:\n  gid_index: 300\n", `xfer.yaml:2: rdma.gid_index: "300": must be auto or 0 to 255`},
		{"rdma_gid_index: first\n", `xfer.yaml:1: rdma_gid_index: "first": must be auto or 0 to 255`},
		{"rdma:\n  qp_type: UD\n", `xfer.yaml:2: rdma.qp_type: "UD": only RC is supported`},
		{"rdma:\n  use_event_channel: sometimes\n", `xfer.yaml:2: rdma.use_event_channel: "sometimes": not true or false`},
		{"tcp:\n  poll_spin: 20\n", `xfer.yaml:2: tcp.poll_spin: "20": not a duration`},
		{"rdma:\n  devcie: rxe0\n", `xfer.yaml:2: unknown key "devcie" in rdma (known keys: device, port,`},
		{"rdma: rxe0\n", `xfer.yaml:1: rdma: expected a mapping of keys (device, port,`},
		{"tcp:\n  conns: [1]\n", "xfer.yaml:2: tcp.conns: expected a single value"},
		{"huge_pages: sometimes\n", `xfer.yaml:1: huge_pages: "sometimes": not one of auto, off, explicit`},
		{"memory: disk\n", `xfer.yaml:1: memory: "disk": must be auto, memfd, private or cuda:N (GPU memory)`},
		{"tcp.conns: 2\n", `xfer.yaml:1: unknown key "tcp.conns"`},
	} {
		_, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestConfigNestedEnv(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "tcp:\n  conns: 2\nrdma:\n  device: siw0\n"), env(
		"XFER_TCP_POLL_SPIN", "9us",
		"XFER_CONNS", "4",
		"XFER_RDMA_DEVICE", "rxe0",
		"XFER_RDMA_GID_INDEX", "2",
		"XFER_RDMA_USE_EVENT_CHANNEL", "TRUE",
	), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := xfer.Config{TCP: tcp.Config{Conns: 4, PollSpin: 9 * time.Microsecond},
		RDMA: verbs.Config{Device: "rxe0", GIDIndex: verbs.GID(2), UseEventChannel: true}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	_, err = loadConfig("", env("XFER_CONNS", "4", "XFER_TCP_CONNS", "5"), nil)
	if err == nil || !strings.Contains(err.Error(), "XFER_CONNS and XFER_TCP_CONNS both set tcp.conns") {
		t.Errorf("both variables: error %v", err)
	}
	_, err = loadConfig("", env("XFER_RDMA_GID_INDEX", "x"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), `XFER_RDMA_GID_INDEX="x": must be auto or 0 to 255`) {
		t.Errorf("bad gid index: error %v", err)
	}
}

// Every nested config of xfer.Config has a top-level prefix in sections,
// and no top-level key of a nested field collides with another key.
func TestConfigSections(t *testing.T) {
	typ := reflect.TypeFor[xfer.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if key := yamlKey(f); key != "" && isSection(f.Type) {
			if _, ok := sections[key]; !ok {
				t.Errorf("xfer.Config.%s (%s): no entry in sections", f.Name, key)
			}
		}
	}
	flat := map[string]string{}
	for _, f := range configFields() {
		if other, dup := flat[f.flat]; dup {
			t.Errorf("top-level key %s names both %s and %s", f.flat, other, f.key)
		}
		flat[f.flat] = f.key
	}
}

// XFER_DEVICE names the RDMA device over every other source;
// RDMA_DEVICE_NAME only when nothing else named one.
func TestConfigDeviceVariables(t *testing.T) {
	file := writeConfig(t, "rdma:\n  device: file0\n")
	for _, tc := range []struct {
		path string
		env  []string
		want string
	}{
		{"", nil, ""},
		{"", []string{"RDMA_DEVICE_NAME", "name0"}, "name0"},
		{file, []string{"RDMA_DEVICE_NAME", "name0"}, "file0"},
		{"", []string{"XFER_RDMA_DEVICE", "env0", "RDMA_DEVICE_NAME", "name0"}, "env0"},
		{file, []string{"XFER_DEVICE", "dev0"}, "dev0"},
		{file, []string{"XFER_DEVICE", "dev0", "XFER_RDMA_DEVICE", "env0", "RDMA_DEVICE_NAME", "name0"}, "dev0"},
		{file, []string{"XFER_DEVICE", "", "RDMA_DEVICE_NAME", "name0"}, "file0"},
	} {
		cfg, err := loadConfig(tc.path, env(tc.env...), nil)
		if err != nil || cfg.RDMA.Device != tc.want {
			t.Errorf("file %v, env %q: device %q, %v; want %q", tc.path != "", tc.env, cfg.RDMA.Device, err, tc.want)
		}
	}
}

// The README's sample configuration is accepted, and its values are the
// engine's real defaults (but for listen, which has none to show).
func TestREADMEConfigIsTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "## Configuration\n")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no yaml block in the Configuration section")
	}
	var sample xfer.Config
	if err := decodeConfig("README.md", []byte(block), &sample); err != nil {
		t.Fatal(err)
	}
	if sample.Listen == "" {
		t.Error("the sample does not show listen")
	}
	sample.Listen = ""
	e, err := xfer.Open(t.Context(), xfer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	defaults := e.Config()
	defaults.Logger = nil
	// Fields without a config file key.
	sample.RDMA.QPsPerPeer, sample.RDMA.SliceSize = defaults.RDMA.QPsPerPeer, defaults.RDMA.SliceSize
	if !reflect.DeepEqual(sample, defaults) {
		t.Errorf("README.md's sample is not the defaults:\nREADME   %+v\ndefaults %+v", sample, defaults)
	}
}

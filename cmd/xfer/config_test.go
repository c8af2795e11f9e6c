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
		HugePages:        "off",
		Secret:           "s3cret",
		Conns:            4,
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
	if cfg.Conns != 4 || cfg.Advertise != "host.example:7471" {
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

// TestConfigEveryField makes sure every yaml key of xfer.Config can be set
// from text, so that a new field cannot be silently unconfigurable.
func TestConfigEveryField(t *testing.T) {
	samples := map[reflect.Kind]string{reflect.String: "x", reflect.Int: "3", reflect.Int64: "3s", reflect.Bool: "true"}
	typ := reflect.TypeFor[xfer.Config]()
	fields := configFields()
	for i := range typ.NumField() {
		if tag := typ.Field(i).Tag.Get("yaml"); tag == "" {
			t.Errorf("xfer.Config.%s has no yaml tag (use `yaml:\"-\"` to leave it out)", typ.Field(i).Name)
		}
	}
	for _, f := range fields {
		var cfg xfer.Config
		v := reflect.ValueOf(&cfg).Elem().Field(f.index)
		s := samples[v.Kind()]
		if v.Type() == policyType {
			s = "tcp"
		}
		if err := setField(v, s); err != nil {
			t.Errorf("key %s (%s): %v", f.key, v.Type(), err)
		}
		if v.IsZero() {
			t.Errorf("key %s: setting %q left it zero", f.key, s)
		}
	}
}

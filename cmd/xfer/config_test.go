package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/config"
	"github.com/xferio/xfer/config/configtest"
	"github.com/xferio/xfer/transport/tcp"
	"github.com/xferio/xfer/transport/verbs"
)

// The file's decoding is package config's, and tested there; these tests
// check the layers this command adds (the environment, the flags, the
// device variables) and that the command reads the file through config.

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

func TestConfigFileOnly(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, configtest.Full), env(), serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	want := configtest.FullEngine()
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
	cfg, err := loadConfig(writeConfig(t, configtest.Full), env(
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
	cfg, err := loadConfig(writeConfig(t, configtest.Full), e, serveFlags(t, "--memory-mb", "1024", "--transport", "rdma"))
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

func TestConfigBadEnv(t *testing.T) {
	for _, tc := range []struct{ k, v, want string }{
		{"XFER_MEMORY_MB", "abc", `XFER_MEMORY_MB="abc": not an integer`},
		{"XFER_TRANSPORT", "foo", `XFER_TRANSPORT="foo": not one of auto, rdma, shm, tcp`},
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

func TestConfigMissingFile(t *testing.T) {
	_, err := loadConfig(filepath.Join(t.TempDir(), "nope.yaml"), env(), nil)
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("error %v, want one naming the file", err)
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

// XFER_DEVICE names the RDMA device over every other source;
// RDMA_DEVICE_NAME over the config file, under XFER_RDMA_DEVICE.
func TestConfigDeviceVariables(t *testing.T) {
	file := writeConfig(t, "rdma:\n  device: file0\n")
	for _, tc := range []struct {
		path string
		env  []string
		want string
	}{
		{"", nil, ""},
		{"", []string{"RDMA_DEVICE_NAME", "name0"}, "name0"},
		{file, []string{"RDMA_DEVICE_NAME", "name0"}, "name0"},
		{file, []string{"XFER_RDMA_DEVICE", "env0", "RDMA_DEVICE_NAME", "name0"}, "env0"},
		{"", []string{"XFER_RDMA_DEVICE", "env0", "RDMA_DEVICE_NAME", "name0"}, "env0"},
		{file, []string{"XFER_DEVICE", "dev0"}, "dev0"},
		{file, []string{"XFER_DEVICE", "dev0", "XFER_RDMA_DEVICE", "env0", "RDMA_DEVICE_NAME", "name0"}, "dev0"},
		{file, []string{"XFER_DEVICE", "", "RDMA_DEVICE_NAME", "name0"}, "name0"},
		{file, []string{"XFER_DEVICE", "", "RDMA_DEVICE_NAME", ""}, "file0"},
	} {
		cfg, err := loadConfig(tc.path, env(tc.env...), nil)
		if err != nil || cfg.RDMA.Device != tc.want {
			t.Errorf("file %v, env %q: device %q, %v; want %q", tc.path != "", tc.env, cfg.RDMA.Device, err, tc.want)
		}
	}
}

// End to end: with the production section's enable_rdma: false, xfer bench
// runs over tcp, and log_format: json makes every log line a JSON object.
func TestProductionConfigEndToEnd(t *testing.T) {
	cfg := writeConfig(t, "transport:\n  amst:\n    enable_rdma: false\n    rdma_device: mlx5_0\nlog_level: info\nlog_format: json\n")
	o, e, code := xferRun(t, cleanEnv(), "--config", cfg, "bench", "--size", "4KiB", "--iters", "50", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d\n%s%s", code, o, e)
	}
	var res struct{ Transport string }
	if err := json.Unmarshal([]byte(strings.SplitN(o, "\n", 2)[0]), &res); err != nil || res.Transport != "tcp" {
		t.Errorf("bench with enable_rdma: false ran over %q (%v), want tcp:\n%s", res.Transport, err, o)
	}
	lines := strings.Split(strings.TrimSpace(e), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("no log lines at log_level: info")
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["level"] == nil {
			t.Errorf("log line %q is not a JSON record: %v", l, err)
		}
	}
}

// The variables of config's keys are all distinct, and none is one the
// command reads for something else (XFER_CONFIG, XFER_DEVICE) or leaves to
// the tests.
func TestConfigEnvNames(t *testing.T) {
	seen := map[string]string{envConfigFile: "--config", envDevice: "the device override"}
	for _, n := range envTestOnly {
		seen[n] = "the tests"
	}
	for _, k := range config.Keys(config.Command) {
		for _, n := range k.Env() {
			if other, dup := seen[n]; dup {
				t.Errorf("%s names both %s and %s", n, k.Name, other)
			}
			seen[n] = k.Name
		}
	}
	if len(seen) < 30 {
		t.Errorf("only %d variables: config.Keys is broken", len(seen))
	}
}

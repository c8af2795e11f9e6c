package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/transport/verbs"
)

// The production layout's section, as operators have it (testdata holds
// it verbatim), is accepted and every key lands where docs/OPERATIONS.md
// says.
func TestConfigProductionLayout(t *testing.T) {
	cfg, cli, err := loadSettings("testdata/production.yaml", env(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := xfer.Config{
		Transport: xfer.PolicyAuto, // enable_rdma: true
		RDMA: verbs.Config{Device: "mlx5_0", Port: 1, GIDIndex: verbs.GID(0), MTU: 4096, MaxInlineData: 256,
			MaxSendWR: 1024, MaxRecvWR: 1024, MaxSGE: 16, QPType: verbs.QPTypeRC},
		// 4 + 4 MiB of buffers fit the default 64 MiB pool.
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	if cli.LogLevel != "debug" {
		t.Errorf("log_level = %q, want debug", cli.LogLevel)
	}
	// And the engine takes it: the values are within its limits.
	if _, err := cfg.RDMA.WithDefaults(); err != nil {
		t.Errorf("the production section does not validate: %v", err)
	}
}

// Each key of the production layout's option table, one at a time.
func TestConfigProductionKeys(t *testing.T) {
	amst := func(kv string) string { return "transport:\n  amst:\n    " + kv + "\n" }
	for _, tc := range []struct {
		text string
		ok   func(c xfer.Config) bool
	}{
		{amst("enable_rdma: true"), func(c xfer.Config) bool { return c.Transport == xfer.PolicyAuto }},
		{amst("enable_rdma: false"), func(c xfer.Config) bool { return c.Transport == xfer.PolicyTCP }},
		{amst("rdma_device: siw0"), func(c xfer.Config) bool { return c.RDMA.Device == "siw0" }},
		{amst("rdma_device: \"\""), func(c xfer.Config) bool { return c.RDMA.Device == "" }},
		{amst("rdma_port: 2"), func(c xfer.Config) bool { return c.RDMA.Port == 2 }},
		{amst("rdma_gid_index: 3"), func(c xfer.Config) bool { return c.RDMA.GIDIndex == verbs.GID(3) }},
		{amst("rdma_mtu: 1024"), func(c xfer.Config) bool { return c.RDMA.MTU == 1024 }},
		{amst("rdma_max_inline_data: 128"), func(c xfer.Config) bool { return c.RDMA.MaxInlineData == 128 }},
		{amst("rdma_max_send_wr: 512"), func(c xfer.Config) bool { return c.RDMA.MaxSendWR == 512 }},
		{amst("rdma_max_recv_wr: 2048"), func(c xfer.Config) bool { return c.RDMA.MaxRecvWR == 2048 }},
		{amst("rdma_max_sge: 4"), func(c xfer.Config) bool { return c.RDMA.MaxSGE == 4 }},
		{amst("rdma_qp_type: rc"), func(c xfer.Config) bool { return c.RDMA.QPType == verbs.QPTypeRC }},
		{amst("rdma_use_srq: true"), func(c xfer.Config) bool { return c.RDMA.UseSRQ }},
		{amst("rdma_use_event_channel: true"), func(c xfer.Config) bool { return c.RDMA.UseEventChannel }},
		// The buffers raise the pool to their sum, never lower it.
		{amst("rdma_send_buffer_mb: 100\n    rdma_recv_buffer_mb: 60"), func(c xfer.Config) bool { return c.MemoryMB == 160 }},
		{amst("rdma_send_buffer_mb: 8"), func(c xfer.Config) bool { return c.MemoryMB == 0 }},
		{"memory_mb: 512\n" + amst("rdma_send_buffer_mb: 100\n    rdma_recv_buffer_mb: 100"), func(c xfer.Config) bool { return c.MemoryMB == 512 }},
		{amst("rdma_send_buffer_mb: 300") + "memory_mb: 128\n", func(c xfer.Config) bool { return c.MemoryMB == 300 }},
		{"transport:\n  amst:\n", func(c xfer.Config) bool { return reflect.DeepEqual(c, xfer.Config{}) }},
		// Beside our own keys.
		{amst("rdma_device: rxe0") + "listen: :0\ntcp:\n  conns: 2\n", func(c xfer.Config) bool {
			return c.RDMA.Device == "rxe0" && c.Listen == ":0" && c.TCP.Conns == 2
		}},
	} {
		cfg, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if err != nil || !tc.ok(cfg) {
			t.Errorf("%q: got %+v, %v", tc.text, cfg, err)
		}
	}
}

// A key xfer does not take is refused with the reason, and a value out of
// range with the key it came from.
func TestConfigProductionRefused(t *testing.T) {
	amst := func(kv string) string { return "transport:\n  amst:\n    " + kv + "\n" }
	for _, tc := range []struct{ text, want string }{
		{amst("rdma_qp_type: UD"), `transport.amst.rdma_qp_type: "UD": xfer uses RC queue pairs; UD is not supported because UD queue pairs have no RDMA WRITE or READ`},
		{amst("rdma_qp_type: DCT"), `xfer uses RC queue pairs; DCT is not supported because it is an mlx5-only extension`},
		{amst("rdma_qp_type: UC"), `UC is not supported because`},
		{amst("rdma_qp_type: XRC"), `xfer.yaml:3: transport.amst.rdma_qp_type: "XRC": only RC is supported`},
		{amst("rdma_adaptive_routing: true"), `transport.amst.rdma_adaptive_routing: not supported: adaptive routing is a property of the InfiniBand fabric`},
		{amst("rdma_devcie: mlx5_0"), `unknown key "rdma_devcie" in transport.amst (known keys: enable_rdma, rdma_send_buffer_mb, rdma_recv_buffer_mb, rdma_device,`},
		{amst("enable_rdma: maybe"), `transport.amst.enable_rdma: "maybe": not true or false`},
		{amst("rdma_port: one"), `transport.amst.rdma_port: "one": not an integer`},
		{amst("rdma_mtu: 9000"), ``}, // decoded; the engine refuses it (below)
		{amst("rdma_send_buffer_mb: -1"), `transport.amst.rdma_send_buffer_mb: "-1": must be an integer from 0`},
		{amst("rdma_device: [a, b]"), `transport.amst.rdma_device: expected a single value`},
		{"transport:\n  rdma: true\n", `transport: a mapping holds the amst section of the production layout`},
		{"transport:\n  amst: on\n", `transport.amst: expected a mapping of keys`},
		{amst("rdma_device: a") + "rdma_device: b\n", `key "rdma_device" sets the same option as "transport.amst.rdma_device" on line 3`},
		{amst("rdma_device: a\n    rdma_device: b"), `repeats the one on line 3`},
		{"transport: tcp\n" + amst("enable_rdma: true"), `key "transport" repeats the one on line 1`},
		{amst("enable_rdma: true") + "transport: tcp\n", `key "transport" sets the same option as "transport.amst.enable_rdma" on line 3`},
		{"log_level: loud\n", `xfer.yaml:1: log_level: "loud": must be debug, info, warn or error`},
		{"log_format: xml\n", `xfer.yaml:1: log_format: "xml": must be text or json`},
		{"log_format: [json]\n", `log_format: expected a single value`},
		{"log_level: info\nlog_level: debug\n", `key "log_level" repeats the one on line 1`},
	} {
		cfg, err := loadConfig(writeConfig(t, tc.text), env(), nil)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.text, err)
			} else if _, err := cfg.RDMA.WithDefaults(); err == nil || !strings.Contains(err.Error(), "rdma.mtu 9000") {
				t.Errorf("%q: the engine's check said %v", tc.text, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
}

// log_level and log_format come from the file, then XFER_LOG_LEVEL and
// XFER_LOG_FORMAT, then the flags.
func TestConfigLogSettings(t *testing.T) {
	file := writeConfig(t, "log_level: info\nlog_format: json\n")
	for _, tc := range []struct {
		path          string
		env           []string
		flags         []string
		level, format string
	}{
		{"", nil, nil, "", ""},
		{file, nil, nil, "info", "json"},
		{file, []string{"XFER_LOG_LEVEL", "ERROR"}, nil, "error", "json"},
		{file, []string{"XFER_LOG_FORMAT", "text"}, []string{"--log-level", "debug"}, "debug", "text"},
		{"", []string{"XFER_LOG_FORMAT", "json"}, []string{"--log-format", "text"}, "", "text"},
	} {
		root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
		fs := root.PersistentFlags()
		if err := fs.Parse(tc.flags); err != nil {
			t.Fatal(err)
		}
		_, cli, err := loadSettings(tc.path, env(tc.env...), fs)
		if err != nil || cli.LogLevel != tc.level || cli.LogFormat != tc.format {
			t.Errorf("file %v, env %q, flags %q: %+v, %v; want level %q, format %q", tc.path != "", tc.env, tc.flags, cli, err, tc.level, tc.format)
		}
	}
	for _, e := range [][]string{{"XFER_LOG_FORMAT", "xml"}, {"XFER_LOG_LEVEL", "loud"}} {
		if _, _, err := loadSettings("", env(e...), nil); err == nil || !strings.Contains(err.Error(), e[0]) {
			t.Errorf("%s=%s: error %v", e[0], e[1], err)
		}
	}
}

// The command logs as the file says: JSON at the file's level.
func TestLogFormatFromFile(t *testing.T) {
	t.Setenv(envConfigFile, writeConfig(t, "log_level: info\nlog_format: json\n"))
	var stderr bytes.Buffer
	g := &globals{stderr: &stderr, logLevel: defaultLogLevel, logFormat: defaultLogFormat}
	var err error
	if g.log, err = newLogger(g.stderr, g.logLevel, g.logFormat); err != nil {
		t.Fatal(err)
	}
	cfg, err := g.config(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Info("fell back", "peer", "10.0.0.2:7471")
	var rec map[string]any
	if err := json.Unmarshal(stderr.Bytes(), &rec); err != nil || rec["level"] != "INFO" || rec["msg"] != "fell back" {
		t.Fatalf("log line %q (%v): want one JSON record at INFO", stderr.String(), err)
	}
}

// --log-format with an unknown format is a clear error, before anything runs.
func TestLogFormatFlag(t *testing.T) {
	o, e, code := xferRun(t, cleanEnv(), "--log-format", "xml", "version")
	if code != 1 || !strings.Contains(e, `--log-format "xml": must be text or json`) || o != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, o, e)
	}
	cfg := writeConfig(t, "log_format: xml\n")
	_, e, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor")
	if code != 1 || !strings.Contains(e, `log_format: "xml": must be text or json`) {
		t.Fatalf("a bad log_format in the file: exit %d, stderr %q", code, e)
	}
}

// FuzzDecodeConfig: any file is either decoded or refused with an error;
// nothing panics, and what is accepted decodes the same way twice.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{fullConfig, "transport:\n  amst:\n    enable_rdma: false\n    rdma_max_sge: 4\n    rdma_send_buffer_mb: 99\n",
		"rdma:\n  device: rxe0\ntcp: {conns: 2}\nlog_format: json\n", "metrics_listen: 127.0.0.1:9464\n", "metrics_listen: [a]\n", "transport: {amst: {rdma_qp_type: UD}}", "[1, 2]", "a: {b: c}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a, b xfer.Config
		var ca, cb cliSettings
		errA := decodeFile("f.yaml", data, &a, &ca)
		errB := decodeFile("f.yaml", data, &b, &cb)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("decoded once (%v) and not once (%v)", errA, errB)
		}
		if errA == nil && (!reflect.DeepEqual(a, b) || ca != cb) {
			t.Fatalf("two decodings differ: %+v %+v", a, b)
		}
		if errA != nil && !strings.HasPrefix(errA.Error(), "f.yaml") && !strings.HasPrefix(errA.Error(), "config f.yaml") {
			t.Fatalf("error does not name the file: %v", errA)
		}
	})
}

// docs/OPERATIONS.md's sample is the production section of testdata, and
// its table names every key of the layout.
func TestOperationsDocConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "## Configuration in the production layout\n")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/OPERATIONS.md: no yaml block in the production layout section")
	}
	var fromDoc, fromFile xfer.Config
	var cliDoc, cliFile cliSettings
	if err := decodeFile("OPERATIONS.md", []byte(block), &fromDoc, &cliDoc); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeFile("production.yaml", data, &fromFile, &cliFile); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDoc, fromFile) || cliDoc != cliFile {
		t.Errorf("the documented section decodes to %+v, testdata's to %+v", fromDoc, fromFile)
	}
	table, _, _ := strings.Cut(sec, "\n## ")
	keys := []string{amstEnableRDMA, amstSendMB, amstRecvMB, keyLogLevel}
	for k := range amstKeys {
		keys = append(keys, k)
	}
	for k := range amstRefused {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if !strings.Contains(table, "`"+k+"`") {
			t.Errorf("docs/OPERATIONS.md's table does not name %s", k)
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

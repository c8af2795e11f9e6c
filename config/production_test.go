package config

import (
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
func TestProductionLayout(t *testing.T) {
	doc, err := ReadFile("testdata/production.yaml", Command)
	if err != nil {
		t.Fatal(err)
	}
	want := xfer.Config{
		Transport: xfer.PolicyAuto, // enable_rdma: true
		RDMA: verbs.Config{Device: "mlx5_0", Port: 1, GIDIndex: verbs.GID(0), MTU: 4096, MaxInlineData: 256,
			MaxSendWR: 1024, MaxRecvWR: 1024, MaxSGE: 16, QPType: verbs.QPTypeRC},
		// 4 + 4 MiB of buffers fit the default 64 MiB pool.
	}
	if !reflect.DeepEqual(doc.Engine, want) {
		t.Errorf("got  %+v\nwant %+v", doc.Engine, want)
	}
	if doc.LogLevel != "debug" {
		t.Errorf("log_level = %q, want debug", doc.LogLevel)
	}
	// And the engine takes it: the values are within its limits.
	if err := doc.Check(); err != nil {
		t.Errorf("the production section does not validate: %v", err)
	}
}

// Each key of the production layout's option table, one at a time.
func TestProductionKeys(t *testing.T) {
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
		// A bad memory_mb stays bad, for Check to refuse.
		{"memory_mb: -1\n", func(c xfer.Config) bool { return c.MemoryMB == -1 }},
		{"memory_mb: -1\n" + amst("rdma_send_buffer_mb: 100"), func(c xfer.Config) bool { return c.MemoryMB == -1 }},
		// Beside our own keys.
		{amst("rdma_device: rxe0") + "listen: :0\ntcp:\n  conns: 2\n", func(c xfer.Config) bool {
			return c.RDMA.Device == "rxe0" && c.Listen == ":0" && c.TCP.Conns == 2
		}},
	} {
		doc, err := decodeFile(tc.text)
		if err != nil || !tc.ok(doc.Engine) {
			t.Errorf("%q: got %+v, %v", tc.text, doc.Engine, err)
		}
	}
}

// A key xfer does not take is refused with the reason, and a value out of
// range with the key it came from.
func TestProductionRefused(t *testing.T) {
	amst := func(kv string) string { return "transport:\n  amst:\n    " + kv + "\n" }
	for _, tc := range []struct{ text, want string }{
		{amst("rdma_qp_type: UD"), `xfer.yaml:3: transport.amst.rdma_qp_type: "UD": xfer uses RC queue pairs; UD is not supported because UD queue pairs have no RDMA WRITE or READ`},
		{amst("rdma_qp_type: DCT"), `xfer uses RC queue pairs; DCT is not supported because it is an mlx5-only extension`},
		{amst("rdma_qp_type: UC"), `UC is not supported because`},
		{amst("rdma_qp_type: XRC"), `xfer.yaml:3: transport.amst.rdma_qp_type: "XRC": only RC is supported`},
		{amst("rdma_adaptive_routing: true"), `transport.amst.rdma_adaptive_routing: not supported: adaptive routing is a property of the InfiniBand fabric`},
		{amst("rdma_devcie: mlx5_0"), `xfer.yaml:3: unknown key "rdma_devcie" in transport.amst: did you mean rdma_device?`},
		{amst("enable_rdma: maybe"), `transport.amst.enable_rdma: "maybe": not true or false`},
		{amst("rdma_port: one"), `transport.amst.rdma_port: "one": not an integer`},
		{amst("rdma_send_buffer_mb: -1"), `transport.amst.rdma_send_buffer_mb: "-1": must be an integer from 0`},
		{amst("rdma_device: [a, b]"), `transport.amst.rdma_device: expected a single value`},
		{"transport:\n  rdma: true\n", `transport: a mapping holds the amst section of the production layout`},
		{"transport:\n  amst: on\n", `transport.amst: expected a mapping of keys`},
		{amst("rdma_device: a") + "rdma_device: b\n", `key "rdma_device" sets the same option as "transport.amst.rdma_device" on line 3`},
		{amst("rdma_device: a\n    rdma_device: b"), `repeats the one on line 3`},
		{"transport: tcp\n" + amst("enable_rdma: true"), `key "transport" repeats the one on line 1`},
		{amst("enable_rdma: true") + "transport: tcp\n", `key "transport" sets the same option as "transport.amst.enable_rdma" on line 3`},
	} {
		_, err := decodeFile(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v\nwant it to contain %q", tc.text, err, tc.want)
		}
	}
	// Decoded, and refused by the engine's check.
	doc, err := decodeFile(amst("rdma_mtu: 9000"))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Check(); err == nil || !strings.Contains(err.Error(), "rdma.mtu 9000") {
		t.Errorf("rdma_mtu 9000: the engine's check said %v", err)
	}
}

// docs/OPERATIONS.md's sample is the production section of testdata, and
// its table names every key of the layout.
func TestOperationsDocConfig(t *testing.T) {
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "## Configuration in the production layout\n")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/OPERATIONS.md: no yaml block in the production layout section")
	}
	fromDoc, err := DecodeYAML("OPERATIONS.md", []byte(block), Command)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadFile("testdata/production.yaml", Command)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromDoc, fromFile) {
		t.Errorf("the documented section decodes to %+v, testdata's to %+v", fromDoc, fromFile)
	}
	table, _, _ := strings.Cut(sec, "\n## ")
	keys := []string{amstEnableRDMA, amstSendMB, amstRecvMB, KeyLogLevel}
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

// The README's sample configuration is accepted, and its values are the
// engine's real defaults (but for listen, which has none to show).
func TestREADMEConfigIsTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), "## Configuration\n")
	_, block, ok2 := strings.Cut(sec, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no yaml block in the Configuration section")
	}
	doc, err := DecodeYAML("README.md", []byte(block), Command)
	if err != nil {
		t.Fatal(err)
	}
	sample := doc.Engine
	if sample.Listen == "" {
		t.Error("the sample does not show listen")
	}
	sample.Listen = ""
	defaults, err := xfer.Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	defaults.Logger = nil
	// Fields without a config file key.
	sample.RDMA.QPsPerPeer, sample.RDMA.SliceSize = defaults.RDMA.QPsPerPeer, defaults.RDMA.SliceSize
	if !reflect.DeepEqual(sample, defaults) {
		t.Errorf("README.md's sample is not the defaults:\nREADME   %+v\ndefaults %+v", sample, defaults)
	}
}

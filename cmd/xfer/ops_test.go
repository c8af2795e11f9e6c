package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xferio/xfer/internal/testutil"
)

// opsServe starts `xfer serve` over tcp with an operations endpoint and
// returns its data address and its endpoint's address.
func opsServe(t *testing.T, args ...string) (addr, ops string) {
	t.Helper()
	cmd := exec.Command(xferBinary(t), append([]string{"serve", "--listen", "127.0.0.1:0", "--transport", "tcp", "--metrics-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = cleanEnv()
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	line := testutil.StartProcess(t, cmd)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), serveBanner)
	if !ok {
		t.Fatalf("serve printed %q", line)
	}
	errs := bufio.NewReader(errPipe)
	line, err = errs.ReadString('\n')
	ops, ok = strings.CutPrefix(strings.TrimSpace(line), opsBanner)
	if err != nil || !ok {
		t.Fatalf("serve printed %q on stderr: %v", line, err)
	}
	go io.Copy(io.Discard, errs)
	return addr, ops
}

// runReady runs the command args (with --metrics-listen) in this process
// until ctx ends. It returns the address of the command's operations
// endpoint once /readyz answers 200 (the endpoint listens before the
// command serves; the test's own timeout bounds the wait), and the channel
// the command's exit code comes on.
func runReady(t *testing.T, ctx context.Context, args ...string) (ops string, exit <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, io.Discard, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	ops, ok := strings.CutPrefix(strings.TrimSpace(line), opsBanner)
	if !ok {
		t.Fatalf("stderr: %q", line)
	}
	go io.Copy(io.Discard, pr)
	for {
		if code, _ := httpGet(t, "http://"+ops+readyzPath); code == 200 {
			return ops, done
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// httpGet gets u and returns the answer's status code and body.
func httpGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, _, b := testutil.HTTPDo(t, req)
	return code, b
}

// parseExposition parses a text exposition with Prometheus's own parser.
func parseExposition(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return mfs
}

// counter sums family name's series whose labels include want.
func counter(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	mf := mfs[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// TestOpsEndpoint: `xfer serve --metrics-listen` serves the engine's
// metrics (its byte counters grow while a bench writes to it), the status
// API, /healthz and /readyz, and no profiler without --pprof; `xfer
// status` prints the status as tables and as JSON; promtool accepts the
// exposition.
func TestOpsEndpoint(t *testing.T) {
	addr, ops := opsServe(t)
	if code, b := httpGet(t, "http://"+ops+healthzPath); code != 200 {
		t.Errorf("%s: %d %s", healthzPath, code, b)
	}
	if code, b := httpGet(t, "http://"+ops+readyzPath); code != 200 {
		t.Errorf("%s: %d %s", readyzPath, code, b)
	}
	if code, _ := httpGet(t, "http://"+ops+pprofPath); code != 404 {
		t.Errorf("%s without --pprof: %d, want 404", pprofPath, code)
	}
	if out, errOut, code := xferRun(t, cleanEnv(), "bench", "--peer", addr, "--transport", "tcp", "--size", "4KiB", "--iters", "2000", "--json"); code != 0 {
		t.Fatalf("bench: exit %d\n%s%s", code, out, errOut)
	}
	code, body := httpGet(t, "http://"+ops+metricsPath)
	if code != 200 {
		t.Fatalf("%s: %d", metricsPath, code)
	}
	mfs := parseExposition(t, body)
	if got := counter(mfs, "xfer_served_bytes_total", map[string]string{"op": "write", "transport": "tcp"}); got < 2000*4096 {
		t.Errorf("xfer_served_bytes_total{op=write,transport=tcp} = %v after 2000 writes of 4 KiB, want at least %d", got, 2000*4096)
	}
	if got := counter(mfs, "xfer_pool_capacity_bytes", nil); got <= 0 {
		t.Errorf("xfer_pool_capacity_bytes = %v", got)
	}
	if mfs["go_goroutines"] == nil || mfs["process_cpu_seconds_total"] == nil {
		t.Errorf("the Go and process collectors are missing")
	}
	promtoolCheckMetrics(t, body)

	out, errOut, code := xferRun(t, cleanEnv(), "status", "--addr", ops)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"command: serve", "policy tcp", "TRANSPORT", "rdma", "PEER", "pool:", "fallbacks 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = xferRun(t, cleanEnv(), "status", "--addr", "http://"+ops, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if doc.Command != "serve" || len(doc.Engines) != 1 || doc.Engines[0].Policy != "tcp" || doc.Engines[0].Addr != addr ||
		len(doc.Engines[0].Transports) != 3 || doc.Engines[0].Pool.Capacity == 0 || doc.Version == "" {
		t.Errorf("status --json: %+v", doc)
	}
	for _, tr := range doc.Engines[0].Transports {
		if !tr.Available && tr.Reason == "" {
			t.Errorf("transport %s is not available and the status does not say why", tr.Name)
		}
	}
	if _, errOut, code := xferRun(t, cleanEnv(), "status", "--addr", "127.0.0.1:1"); code == 0 || !strings.Contains(errOut, "--metrics-listen") {
		t.Errorf("status of nothing: exit %d, %q", code, errOut)
	}
}

// TestOpsEndpointPprof: --pprof adds the profiler; the coordinator serves
// the endpoint too, and /readyz goes 503 once it shuts down.
func TestOpsEndpointPprof(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ops, exit := runReady(t, ctx, "coordinator", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--pprof")
	if code, b := httpGet(t, "http://"+ops+pprofPath); code != 200 || !bytes.Contains(b, []byte("goroutine")) {
		t.Errorf("%s with --pprof: %d", pprofPath, code)
	}
	var doc statusDoc
	_, b := httpGet(t, "http://"+ops+statusPath)
	if err := json.Unmarshal(b, &doc); err != nil || doc.Command != "coordinator" || len(doc.Engines) != 0 {
		t.Errorf("coordinator status: %+v, %v", doc, err)
	}
	cancel()
	if code := <-exit; code != 0 {
		t.Fatalf("coordinator exited %d", code)
	}
}

// TestMetricsListenConfig: metrics_listen is a config file key and
// XFER_METRICS_LISTEN its variable; a flag overrides both, and a file with
// a bad value is refused.
func TestMetricsListenConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("transport: tcp\nmetrics_listen: 127.0.0.1:9999\n"), 0o600)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("metrics_listen: [1, 2]\n"), 0o600)
	for _, tc := range []struct {
		file, env, flag, want, err string
	}{
		{file: good, want: "127.0.0.1:9999"},
		{file: good, env: ":1234", want: ":1234"},
		{file: good, env: ":1234", flag: ":5678", want: ":5678"},
		{file: good, flag: "", want: "127.0.0.1:9999"},
		{file: bad, err: "metrics_listen"},
	} {
		t.Setenv("XFER_METRICS_LISTEN", tc.env)
		g := &globals{configPath: tc.file}
		cmd := newServeCmd(g)
		if tc.flag != "" {
			cmd.Flags().Set("metrics-listen", tc.flag)
		}
		got, _, err := g.metricsListen(cmd.Flags())
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %q, %v; want an error naming %s", tc, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc, got, err, tc.want)
		}
		// The engine's configuration accepts the file with the key.
		if _, err := loadSettings(tc.file, func(string) (string, bool) { return "", false }, nil); err != nil {
			t.Errorf("loadSettings(%s): %v", tc.file, err)
		}
	}
}

// promtoolCheckMetrics runs `promtool check metrics` on an exposition:
// Prometheus's own linter. Without promtool it skips, unless
// XFER_REQUIRE_PROMETHEUS=1 (CI), where it fails.
func promtoolCheckMetrics(t *testing.T, exposition []byte) {
	t.Helper()
	path := testutil.PrometheusProgram(t, "promtool")
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestPrometheusScrapesServe: a real Prometheus (Debian's package) scrapes
// `xfer serve --metrics-listen` while a bench writes to it, and its query
// API then reports xfer's byte counters above zero.
func TestPrometheusScrapesServe(t *testing.T) {
	prom := testutil.PrometheusProgram(t, "prometheus")
	addr, ops := opsServe(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: xfer\n    static_configs:\n      - targets: [%q]\n", ops)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// A free port for Prometheus's web listener: it cannot take :0 and
	// say which port it got.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var promLog syncBuffer
	cmd := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &promLog, &promLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	benchDone := make(chan error, 1)
	go func() {
		c := exec.CommandContext(ctx, xferBinary(t), "bench", "--peer", addr, "--transport", "tcp", "--size", "64KiB", "--duration", "3s", "--json")
		c.Env = cleanEnv()
		out, err := c.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v\n%s", err, out)
		}
		benchDone <- err
	}()
	// Wait, bounded by ctx, for Prometheus to have scraped the counter
	// above zero.
	q := "http://" + web + "/api/v1/query?query=" + url.QueryEscape(`sum(xfer_served_bytes_total{job="xfer",op="write"})`)
	var last string
	for {
		if ctx.Err() != nil {
			t.Fatalf("Prometheus never reported xfer_served_bytes_total above 0; last answer %s\nprometheus log:\n%s", last, promLog.String())
		}
		if v, raw, ok := promQuery(q); ok && v > 0 {
			t.Logf("Prometheus: sum(xfer_served_bytes_total{op=\"write\"}) = %v", v)
			break
		} else {
			last = raw
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := <-benchDone; err != nil {
		t.Fatalf("bench: %v", err)
	}
}

// promQuery runs an instant query and returns the first sample's value.
func promQuery(u string) (float64, string, bool) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err.Error(), false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(b, &r) != nil || r.Status != "success" || len(r.Data.Result) == 0 {
		return 0, string(b), false
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, string(b), err == nil
}

// TestOpsEndpointServices: kv serve and pages serve serve the endpoint
// too, with their own metrics and their engines' in /metrics and the
// command's name in the status; bench serves it while it runs.
func TestOpsEndpointServices(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   []string
		status string
	}{
		{[]string{"kv", "serve", "--listen", "127.0.0.1:0", "--transport", "tcp", "--memory-mb", "8"}, []string{"xfer_kv_gets_total", "xfer_pool_capacity_bytes"}, "kv serve"},
		{[]string{"pages", "serve", "--listen", "127.0.0.1:0", "--transport", "tcp", "--size", "1MiB"}, []string{"xfer_ops_total", "xfer_registered_regions"}, "pages serve"},
	} {
		t.Run(tc.status, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ops, exit := runReady(t, ctx, append(tc.args, "--metrics-listen", "127.0.0.1:0")...)
			_, body := httpGet(t, "http://"+ops+metricsPath)
			mfs := parseExposition(t, body)
			for _, name := range tc.want {
				if mfs[name] == nil {
					t.Errorf("/metrics lacks %s", name)
				}
			}
			var doc statusDoc
			_, b := httpGet(t, "http://"+ops+statusPath)
			if err := json.Unmarshal(b, &doc); err != nil || doc.Command != tc.status || len(doc.Engines) != 1 {
				t.Errorf("status: %+v, %v", doc, err)
			}
			cancel()
			if code := <-exit; code != 0 {
				t.Fatalf("exit %d", code)
			}
		})
	}
	t.Run("bench", func(t *testing.T) {
		// The variable sets bench's address; the serve it starts (which
		// inherits the environment) must not try it too: it would fail
		// to listen there, and bench with it.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		out, errOut, code := xferRun(t, cleanEnv("XFER_METRICS_LISTEN="+addr), "bench", "--transport", "tcp", "--size", "64", "--iters", "200")
		if code != 0 || strings.Count(errOut, opsBanner) != 1 {
			t.Errorf("bench with XFER_METRICS_LISTEN: exit %d, stderr %q\n%s", code, errOut, out)
		}
	})
}

// FuzzStatusDocument: xfer status decodes whatever answers at --addr into
// a document, or refuses it with an error; it never panics, and what it
// accepts has a version.
func FuzzStatusDocument(f *testing.F) {
	good, _ := json.Marshal(engineStatus("serve"))
	f.Add(good)
	f.Add([]byte(`{"version":"v1","go":"go1.26","engines":[{"peers":[{"up_since":"2026-01-01T00:00:00Z"}]}]}`))
	f.Add([]byte(`{"engines":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc, err := decodeStatus(raw)
		if err == nil && doc.Version == "" {
			t.Fatalf("accepted a document without a version: %q", raw)
		}
		if err == nil {
			printStatus(io.Discard, doc)
		}
	})
}

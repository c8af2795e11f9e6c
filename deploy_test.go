package xfer_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/directory"
	"github.com/xferio/xfer/internal/testutil"
	"github.com/xferio/xfer/kv"
)

// exportedNames gathers the metrics a real engine pair and a real KV
// server export after some traffic: every series name a query may use
// (a histogram's _bucket, _sum and _count included).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	cli, p, desc := metricsPair(t, xfer.PolicyTCP, prometheus.WrapRegistererWith(prometheus.Labels{"engine": "client"}, reg),
		prometheus.WrapRegistererWith(prometheus.Labels{"engine": "server"}, reg))
	ctx := context.Background()
	buf, err := cli.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := p.Write(ctx, buf.Bytes(), desc.At(0)); err != nil {
			t.Fatal(err)
		}
	}
	bad := desc
	bad.Key++
	if err := p.Write(ctx, buf.Bytes(), bad.At(0)); err == nil {
		t.Fatal("a write with a wrong key succeeded") // xfer_op_errors_total exists once one failed
	}
	kreg := prometheus.NewRegistry()
	// A server of a cluster (the fence's metrics), with a disk tier (the
	// disk tier's).
	coord := httptest.NewServer(directory.NewCoordinator(directory.CoordinatorOptions{}))
	defer coord.Close()
	s, err := kv.NewServer(ctx, kv.ServerOptions{Engine: xfer.Config{Transport: xfer.PolicyTCP, Listen: "127.0.0.1:0", MemoryMB: 4,
		Directory: coord.URL, NodeID: "deploy-kv"}, Metrics: kreg, DiskDir: t.TempDir(), DiskSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Advertise(ctx, "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, g := range []prometheus.Gatherer{reg, kreg} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			n := mf.GetName()
			names[n] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			}
		}
	}
	if !names["xfer_ops_total"] || !names["xfer_kv_gets_total"] {
		t.Fatalf("the engine and the KV server exported %d names, not their own", len(names))
	}
	return names
}

// grafanaVars are the dashboard's variables, replaced as Grafana does
// before it sends a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h", "$instance", ".*")

var labelValues = regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*), *[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// TestGrafanaDashboard parses every expression of deploy/grafana/xfer.json
// with Prometheus's own PromQL parser, and checks that each metric it names
// is one that an engine or KV server exports, and that the dashboard has
// the panels operators look for.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("deploy/grafana/xfer.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/xfer.json: %v", err)
	}
	names := exportedNames(t)
	check := func(where, name string) {
		if !names[name] {
			t.Errorf("%s: metric %s is not one xfer exports", where, name)
		}
	}
	var titles []string
	exprs := 0
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			q := grafanaVars.Replace(tg.Expr)
			e, err := parser.ParseExpr(q)
			if err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
				continue
			}
			found := 0
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					found++
					name := vs.Name
					for _, m := range vs.LabelMatchers {
						if m.Name == "__name__" {
							name = m.Value
						}
					}
					check("panel "+p.Title, name)
				}
				return nil
			})
			if found == 0 {
				t.Errorf("panel %q: %q selects no metric", p.Title, tg.Expr)
			}
		}
	}
	for _, v := range dash.Templating.List {
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1])
	}
	if exprs < 10 {
		t.Errorf("only %d expressions: the dashboard lost its panels", exprs)
	}
	for _, want := range []string{"Throughput", "Latency p50", "Latency p99", "Errors", "Fallbacks and setup retries", "Connected peers", "Pool", "KV requests", "KV hit ratio"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (panels: %v)", want, titles)
		}
	}
}

// TestPrometheusRules: promtool accepts the recording rules of
// deploy/prometheus, and their unit tests (which check that each rule
// records its compatibility name from xfer's metrics) pass. Every metric
// the rules read is one xfer exports.
func TestPrometheusRules(t *testing.T) {
	promtool := testutil.PrometheusProgram(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", "dwcp-compat.rules.yml"},
		{"test", "rules", "dwcp-compat.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "deploy/prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	raw, err := os.ReadFile("deploy/prometheus/dwcp-compat.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	names := exportedNames(t)
	exprRE := regexp.MustCompile(`(?m)^\s*expr: (.*)$`)
	for _, m := range exprRE.FindAllStringSubmatch(string(raw), -1) {
		e, err := parser.ParseExpr(m[1])
		if err != nil {
			t.Errorf("%q: %v", m[1], err)
			continue
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && !names[vs.Name] {
				t.Errorf("rule %q reads %s, which xfer does not export", m[1], vs.Name)
			}
			return nil
		})
	}
}

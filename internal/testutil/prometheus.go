package testutil

import (
	"os"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// EnvRequirePrometheus, set to 1 (as CI does), makes a test that needs
// Debian's prometheus package (prometheus, promtool) fail instead of skip
// when it is missing.
const EnvRequirePrometheus = "XFER_REQUIRE_PROMETHEUS"

// PrometheusProgram returns the path of name, a program of Debian's
// prometheus package ("prometheus" or "promtool"), which tools/deps.sh
// installs. Without it the test skips, or fails under
// XFER_REQUIRE_PROMETHEUS=1.
func PrometheusProgram(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		reason := name + " not found: install Debian's prometheus package (tools/deps.sh does)"
		if os.Getenv(EnvRequirePrometheus) == "1" {
			tb.Fatalf("%s=1 but %s", EnvRequirePrometheus, reason)
		}
		tb.Skip(reason)
	}
	return path
}

// Metric returns the first series of the family name that g gathers whose
// labels include labels (label name, value, ...), or nil when it has none;
// a label it lacks has the value "", as in Prometheus.
// The series of one family all have the same label names, so a caller that
// names all of them gets the one series it names.
func Metric(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

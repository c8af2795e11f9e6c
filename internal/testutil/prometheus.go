package testutil

import (
	"os"
	"os/exec"
	"testing"
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

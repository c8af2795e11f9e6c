package status

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestFallbackWarnedOnce: a fallback is logged at Warn the first time a peer
// falls back for a reason, and only at Debug after that.
func TestFallbackWarnedOnce(t *testing.T) {
	var buf bytes.Buffer
	var l Log
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l.WarnOnce(log, "10.0.0.2:7471", "rdma: no device", "falling back")
	l.WarnOnce(log, "10.0.0.2:7471", "rdma: no device", "falling back")
	l.WarnOnce(log, "10.0.0.3:7471", "rdma: no device", "falling back")
	l.WarnOnce(log, "10.0.0.2:7471", "shm: other host", "falling back")
	got := buf.String()
	if n := strings.Count(got, "level=WARN"); n != 3 {
		t.Errorf("%d warnings, want 3 (one per peer and reason):\n%s", n, got)
	}
	if n := strings.Count(got, "level=DEBUG"); n != 1 {
		t.Errorf("%d debug lines, want 1 (the repeat):\n%s", n, got)
	}
	for range 2 * maxWarned {
		l.WarnOnce(log, strings.Repeat("x", 8), "r", "m")
	}
	if n := len(l.warned); n > maxWarned {
		t.Errorf("remembers %d warnings, more than %d", n, maxWarned)
	}
}

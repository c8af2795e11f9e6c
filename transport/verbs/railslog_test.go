package verbs

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A rail's device left out of new connections is logged once per error,
// and its return once.
func TestRailsNoteUsable(t *testing.T) {
	var buf bytes.Buffer
	r := &rails{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	gone := errors.New("rdma: device siw8: no ACTIVE port")
	r.noteUsable("siw8", nil, 2) // usable from the start: nothing to say
	r.noteUsable("siw8", gone, 2)
	r.noteUsable("siw8", gone, 2)
	r.noteUsable("siw0", nil, 2)
	r.noteUsable("siw8", errors.New("rdma: device siw8: removed"), 2)
	r.noteUsable("siw8", nil, 2)
	r.noteUsable("siw8", nil, 2)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines logged, want 3 (two errors, one return):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"level=WARN.*no ACTIVE port", "level=WARN.*removed", "level=INFO.*usable again"} {
		parts := strings.Split(want, ".*")
		if !strings.Contains(lines[i], parts[0]) || !strings.Contains(lines[i], parts[1]) || !strings.Contains(lines[i], "device=siw8") {
			t.Errorf("line %d: %s; want %s for siw8", i, lines[i], want)
		}
	}
}

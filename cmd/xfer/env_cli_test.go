package main

import (
	"strings"
	"testing"
)

func TestUnknownEnv(t *testing.T) {
	w := unknownEnv([]string{"PATH=/bin", "XFER_MEMORY_MB=64", "XFER_MEMROY_MB=64", "XFER_TCP_CONNS=2", "XFER_LOG_LEVEL=info", "XFER_LOG_FORMAT=json", "XFER_TEST_DEVICE=rxe0", "XFER_WHATEVER=1"})
	if len(w) != 2 {
		t.Fatalf("warnings %q: want two (XFER_MEMROY_MB, XFER_WHATEVER)", w)
	}
	if !strings.Contains(w[0], "XFER_MEMROY_MB") || !strings.Contains(w[0], "did you mean XFER_MEMORY_MB") {
		t.Errorf("warning %q: want the variable and a suggestion", w[0])
	}
	if !strings.Contains(w[1], "XFER_WHATEVER") || strings.Contains(w[1], "did you mean") {
		t.Errorf("warning %q: want the variable and no suggestion", w[1])
	}
}

// TestUnknownEnvWarned: the command says so, once, and still runs.
func TestUnknownEnvWarned(t *testing.T) {
	_, e, code := xferRun(t, cleanEnv("XFER_MEMROY_MB=64"), "bench", "--transport", "tcp", "--size", "4KiB", "--iters", "50")
	if code != 0 || strings.Count(e, "XFER_MEMROY_MB") != 1 || !strings.Contains(e, "XFER_MEMORY_MB") {
		t.Fatalf("bench with XFER_MEMROY_MB set: exit %d: %q", code, e)
	}
}

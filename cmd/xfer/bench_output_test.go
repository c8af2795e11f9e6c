package main

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/xferio/xfer/bench"
)

// checkJSONFields fails unless line is a JSON object with exactly the
// fields of a bench.Record (whose own tests pin their names), and returns
// it decoded.
func checkJSONFields(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m, want map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	b, _ := json.Marshal(bench.Record{})
	json.Unmarshal(b, &want)
	if got, fields := slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, fields) {
		t.Fatalf("fields %v, want exactly %v", got, fields)
	}
	return m
}

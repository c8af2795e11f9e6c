package main

import (
	"encoding/json"
	"slices"
	"testing"
)

// jsonFields is the exact set of fields of a "bench --json" line
// (bench.Record), which the end-to-end tests check.
var jsonFields = []string{
	"bytes_per_sec", "cpu_sec_per_gb", "lat_p50_ns", "lat_p999_ns", "lat_p99_ns", "op",
	"ops", "seconds", "size_bytes", "transport", "verified",
}

// checkJSONFields fails unless line is a JSON object with exactly
// jsonFields, and returns it decoded.
func checkJSONFields(t *testing.T, line []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("line %q: %v", line, err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, jsonFields) {
		t.Fatalf("fields %v, want exactly %v", keys, jsonFields)
	}
	return m
}

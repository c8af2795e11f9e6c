package main

import (
	"fmt"
	"slices"
	"strings"
)

// envTestOnly are XFER_ variables that the project's tests and benchmark
// scripts set for themselves; the command ignores them without a warning.
var envTestOnly = []string{"XFER_TEST_DEVICE", "XFER_TEST_ADDR", "XFER_TEST_CHILD", "XFER_REQUIRE_VERBS", "XFER_REQUIRE_CUDA", "XFER_REQUIRE_PROMETHEUS", "XFER_REQUIRE_ETCD", "XFER_REQUIRE_NETNS", "XFER_KV_INTEGRITY_OPS", "XFER_KV_PUT_LOOP", "XFER_KV_CLUSTER_SERVER"}

// knownEnv lists every XFER_ variable the command reads.
func knownEnv() []string {
	known := append([]string{envConfigFile, envDevice}, cliEnv()...)
	for _, f := range configFields() {
		known = append(known, f.env()...)
	}
	return known
}

// unknownEnv returns a warning for each variable of environ (KEY=VALUE
// pairs) that starts with XFER_ but is not one the command reads: a
// misspelled one would otherwise be ignored without a word. A close known
// name is suggested.
func unknownEnv(environ []string) []string {
	known := knownEnv()
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name) || slices.Contains(envTestOnly, name) {
			continue
		}
		msg := fmt.Sprintf("%s is not a setting of xfer: it is ignored", name)
		if s := closest(name, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		warnings = append(warnings, msg)
	}
	return warnings
}

// closest returns the name in names nearest to s, if it is within a third
// of s's length in edits.
func closest(s string, names []string) string {
	best, bestD := "", len(s)/3+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (a dozen lines
// here rather than a dependency for one suggestion).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

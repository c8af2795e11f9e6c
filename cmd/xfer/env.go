package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/xferio/xfer/config"
)

// envTestOnly are XFER_ variables that the project's tests and benchmark
// scripts set for themselves; the command ignores them without a warning.
var envTestOnly = []string{"XFER_TEST_DEVICE", "XFER_TEST_ADDR", "XFER_TEST_CHILD", "XFER_REQUIRE_VERBS", "XFER_REQUIRE_CUDA", "XFER_REQUIRE_PROMETHEUS", "XFER_REQUIRE_ETCD", "XFER_REQUIRE_NETNS", "XFER_KV_INTEGRITY_OPS", "XFER_KV_PUT_LOOP", "XFER_KV_CLUSTER_SERVER"}

// knownEnv lists every XFER_ variable the command reads.
func knownEnv() []string {
	known := []string{envConfigFile, envDevice}
	for _, k := range config.Keys(config.Command) {
		known = append(known, k.Env()...)
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
		if s := config.Suggest(name, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		warnings = append(warnings, msg)
	}
	return warnings
}

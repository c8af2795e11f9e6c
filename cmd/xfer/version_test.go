package main

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/xferio/xfer/probe"
)

// TestVersion checks `xfer version`, its JSON, and `xfer --version` against
// what the build and the host are.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("version --json: exit %d: %s", code, errb.String())
	}
	var v versionInfo
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("version --json: %v: %s", err, out.String())
	}
	built, why := probe.VerbsBuilt()
	if v.Go != runtime.Version() || v.Verbs != built || v.VerbsWhy != why || v.Version == "" {
		t.Errorf("version --json = %+v; want go %s, verbs built %v (%q)", v, runtime.Version(), built, why)
	}
	if loads := probe.Verbs() == nil; v.Libibverbs != loads || (!loads && v.LibibverbsWhy == "") {
		t.Errorf("libibverbs %v (%q); probe.Verbs says loads=%v", v.Libibverbs, v.LibibverbsWhy, loads)
	}
	if v.ActivePorts == nil {
		t.Error("active_ports is null; want a list")
	}

	out.Reset()
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("version: exit %d: %s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{"xfer " + v.Version + "\n", "go:      " + runtime.Version(), "verbs:   ", "host:    "} {
		if !strings.Contains(text, want) {
			t.Errorf("version output lacks %q:\n%s", want, text)
		}
	}
	if built != strings.Contains(text, "verbs:   built in") {
		t.Errorf("verbs line does not say built=%v:\n%s", built, text)
	}

	out.Reset()
	if code := run(context.Background(), []string{"--version"}, &out, &errb); code != 0 {
		t.Fatalf("--version: exit %d: %s", code, errb.String())
	}
	if out.String() != text {
		t.Errorf("--version printed\n%s\nwant what version prints:\n%s", out.String(), text)
	}
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/xferio/xfer"
)

// TestSecretCommand: xfer secret prints a secret the engine accepts, a new
// one each time.
func TestSecretCommand(t *testing.T) {
	var a, b bytes.Buffer
	if code := run(context.Background(), []string{"secret"}, &a, &bytes.Buffer{}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	run(context.Background(), []string{"secret"}, &b, &bytes.Buffer{})
	s := strings.TrimSpace(a.String())
	if len(s) != 43 || s == strings.TrimSpace(b.String()) {
		t.Fatalf("secrets %q and %q", s, b.String())
	}
	if _, err := (xfer.Config{Secret: s}).WithDefaults(); err != nil {
		t.Fatal(err)
	}
}

// TestSecretFlagWarns: --secret on the command line is warned of (it shows
// in ps); the secret itself is not printed.
func TestSecretFlagWarns(t *testing.T) {
	var errOut bytes.Buffer
	g := &globals{stderr: &errOut}
	cmd := newServeCmd(g)
	cmd.Flags().Set("secret", "a-secret-given-on-the-command-line")
	if _, err := g.config(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "--secret shows in ps") || strings.Contains(errOut.String(), "a-secret-given") {
		t.Fatalf("stderr: %q", errOut.String())
	}
}

package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// cliSettings are the config file's keys that configure the command rather
// than the engine: how it logs, and where it serves its metrics. Like the
// engine's keys they come from the file, then XFER_<KEY>, then the flag
// (--log-level, --log-format, --metrics-listen) when it was given.
type cliSettings struct {
	LogLevel  string // debug, info, warn (default) or error
	LogFormat string // text (default) or json
	// MetricsListen is the operations endpoint's address (ops.go); "" for
	// none, the default.
	MetricsListen string
}

// The command's own keys, and their defaults.
const (
	keyLogLevel      = "log_level"
	keyLogFormat     = "log_format"
	keyMetricsListen = "metrics_listen"
	defaultLogLevel  = "warn"
	defaultLogFormat = "text"
)

// cliKeys lists the command's own config file keys.
func cliKeys() []string { return []string{keyLogLevel, keyLogFormat, keyMetricsListen} }

// cliEnv lists their environment variables.
func cliEnv() []string {
	return []string{envPrefix + strings.ToUpper(keyLogLevel), envPrefix + strings.ToUpper(keyLogFormat), envPrefix + strings.ToUpper(keyMetricsListen)}
}

// field returns the setting named by key, or nil.
func (c *cliSettings) field(key string) *string {
	switch key {
	case keyLogLevel:
		return &c.LogLevel
	case keyLogFormat:
		return &c.LogFormat
	case keyMetricsListen:
		return &c.MetricsListen
	}
	return nil
}

// check validates the value of key; its error says what is allowed.
func checkCLI(key, v string) (string, error) {
	if key == keyMetricsListen {
		return strings.TrimSpace(v), nil // an address: the listen checks it
	}
	v = strings.ToLower(strings.TrimSpace(v))
	switch key {
	case keyLogLevel:
		if _, err := parseLevel(v); err != nil {
			return "", err
		}
	case keyLogFormat:
		if v != "text" && v != "json" {
			return "", fmt.Errorf("must be text or json")
		}
	}
	return v, nil
}

// decode takes the top-level key k if it is one of the command's; handled
// reports whether it was.
func (c *cliSettings) decode(name string, k, val *yaml.Node, seen map[string]seenKey) (handled bool, err error) {
	p := c.field(k.Value)
	if p == nil {
		return false, nil
	}
	if s, dup := seen[k.Value]; dup {
		return true, fmt.Errorf("%s:%d: key %q repeats the one on line %d", name, k.Line, k.Value, s.line)
	}
	seen[k.Value] = seenKey{k.Value, k.Line}
	if val.Kind != yaml.ScalarNode {
		return true, fmt.Errorf("%s:%d: %s: expected a single value", name, val.Line, k.Value)
	}
	if val.Tag == "!!null" {
		return true, nil
	}
	v, err := checkCLI(k.Value, val.Value)
	if err != nil {
		return true, fmt.Errorf("%s:%d: %s: %q: %w", name, val.Line, k.Value, val.Value, err)
	}
	*p = v
	return true, nil
}

// applyEnv sets each setting whose XFER_<KEY> variable is set and not empty.
func (c *cliSettings) applyEnv(lookupEnv func(string) (string, bool)) error {
	for _, key := range cliKeys() {
		name := envPrefix + strings.ToUpper(key)
		s, ok := lookupEnv(name)
		if !ok || s == "" {
			continue
		}
		v, err := checkCLI(key, s)
		if err != nil {
			return fmt.Errorf("%s=%q: %w", name, s, err)
		}
		*c.field(key) = v
	}
	return nil
}

// applyFlags sets each setting whose flag exists in fs and was given.
func (c *cliSettings) applyFlags(fs *pflag.FlagSet) error {
	for _, key := range cliKeys() {
		name := strings.ReplaceAll(key, "_", "-")
		fl := fs.Lookup(name)
		if fl == nil || !fl.Changed {
			continue
		}
		v, err := checkCLI(key, fl.Value.String())
		if err != nil {
			return fmt.Errorf("--%s=%q: %w", name, fl.Value.String(), err)
		}
		*c.field(key) = v
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "", "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("must be debug, info, warn or error")
}

// newLogger returns a logger writing to w at the named level ("" is warn),
// as text or JSON ("" is text).
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: must be text or json", format)
}

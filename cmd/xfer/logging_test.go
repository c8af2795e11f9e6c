package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// log_level and log_format come from the file, then XFER_LOG_LEVEL and
// XFER_LOG_FORMAT, then the flags.
func TestConfigLogSettings(t *testing.T) {
	file := writeConfig(t, "log_level: info\nlog_format: json\n")
	for _, tc := range []struct {
		path          string
		env           []string
		flags         []string
		level, format string
	}{
		{"", nil, nil, "", ""},
		{file, nil, nil, "info", "json"},
		{file, []string{"XFER_LOG_LEVEL", "ERROR"}, nil, "error", "json"},
		{file, []string{"XFER_LOG_FORMAT", "text"}, []string{"--log-level", "debug"}, "debug", "text"},
		{"", []string{"XFER_LOG_FORMAT", "json"}, []string{"--log-format", "text"}, "", "text"},
	} {
		root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
		fs := root.PersistentFlags()
		if err := fs.Parse(tc.flags); err != nil {
			t.Fatal(err)
		}
		cli, err := loadSettings(tc.path, env(tc.env...), fs)
		if err != nil || cli.LogLevel != tc.level || cli.LogFormat != tc.format {
			t.Errorf("file %v, env %q, flags %q: %+v, %v; want level %q, format %q", tc.path != "", tc.env, tc.flags, cli, err, tc.level, tc.format)
		}
	}
	for _, e := range [][]string{{"XFER_LOG_FORMAT", "xml"}, {"XFER_LOG_LEVEL", "loud"}} {
		if _, err := loadSettings("", env(e...), nil); err == nil || !strings.Contains(err.Error(), e[0]) {
			t.Errorf("%s=%s: error %v", e[0], e[1], err)
		}
	}
}

// The command logs as the file says: JSON at the file's level.
func TestLogFormatFromFile(t *testing.T) {
	t.Setenv(envConfigFile, writeConfig(t, "log_level: info\nlog_format: json\n"))
	var stderr bytes.Buffer
	g := &globals{stderr: &stderr, logLevel: defaultLogLevel, logFormat: defaultLogFormat}
	var err error
	if g.log, err = newLogger(g.stderr, g.logLevel, g.logFormat); err != nil {
		t.Fatal(err)
	}
	cfg, err := g.config(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Info("fell back", "peer", "10.0.0.2:7471")
	var rec map[string]any
	if err := json.Unmarshal(stderr.Bytes(), &rec); err != nil || rec["level"] != "INFO" || rec["msg"] != "fell back" {
		t.Fatalf("log line %q (%v): want one JSON record at INFO", stderr.String(), err)
	}
}

// --log-format with an unknown format is a clear error, before anything runs.
func TestLogFormatFlag(t *testing.T) {
	o, e, code := xferRun(t, cleanEnv(), "--log-format", "xml", "version")
	if code != 1 || !strings.Contains(e, `--log-format "xml": must be text or json`) || o != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, o, e)
	}
	cfg := writeConfig(t, "log_format: xml\n")
	_, e, code = xferRun(t, cleanEnv(), "--config", cfg, "doctor")
	if code != 1 || !strings.Contains(e, `log_format: "xml": must be text or json`) {
		t.Fatalf("a bad log_format in the file: exit %d, stderr %q", code, e)
	}
}

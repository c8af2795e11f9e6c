package config

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/connector"
)

// Program says whose document is decoded: the keys of the engine are every
// program's, the others belong to one program.
type Program uint8

const (
	// Command is the xfer command's config file: the engine's keys, the
	// log keys, and metrics_listen.
	Command Program = 1 << iota
	// Library is the connector's configuration, the JSON that the C ABI
	// (cmd/libxfer) takes: the engine's keys, the log keys, and the
	// connector's (role, producer, ttl_seconds, pull, chunk_size,
	// wait_for_memory, wait_spin, call_timeout, and device, the RDMA
	// device's name from before the ABI took every key).
	Library

	every = Command | Library
)

func (p Program) String() string {
	switch p {
	case Command:
		return "the xfer command's config file"
	case Library:
		return "the connector's configuration (libxfer)"
	}
	return fmt.Sprintf("Program(%d)", uint8(p))
}

// Document is a decoded configuration. Its zero value is a document with
// no keys: every field's zero means its layer's documented default.
type Document struct {
	// Engine holds the engine's keys (xfer.Config and the transport
	// configs it nests).
	Engine xfer.Config

	// LogLevel is debug, info, warn or error. Default: warn.
	LogLevel string
	// LogFormat is text or json. Default: text.
	LogFormat string

	// MetricsListen is where the xfer command serves its metrics and
	// health endpoints. Default: none. A key of Command only.
	MetricsListen string
	// WebConfigFile is the operations endpoint's web configuration file,
	// in the Prometheus exporters' format (exporter-toolkit): TLS and
	// basic authentication. Default: none, plain HTTP. A key of Command
	// only.
	WebConfigFile string

	// KVDiskDir and KVDiskSize are kv.disk_dir and kv.disk_size: the KV
	// server's disk tier (xfer kv serve --disk-dir, --disk-size), its
	// directory and its size in bytes. Keys of Command only.
	KVDiskDir  string
	KVDiskSize int64

	// The connector's keys (Library only); see connector.Config.
	Role          connector.Role
	Producer      string
	TTL           time.Duration // ttl_seconds: negative means never
	Pull          connector.Pull
	ChunkSize     int
	WaitForMemory bool
	// CallTimeout is call_timeout: the longer bound that rides through a
	// producer's restart (connector.Config.CallTimeout). Zero means the
	// default, fail fast: a producer that is down fails a Get after
	// reconnect_wait, a silent one within op_timeout.
	CallTimeout time.Duration
	// WaitSpin is wait_spin: how long a Get waits on its thread's CPU for
	// the answer before the thread sleeps. Zero means the layer's default
	// (the C ABI's is connector.ThreadWaitSpin), negative none.
	WaitSpin time.Duration
}

// Defaults of the log keys.
const (
	DefaultLogLevel  = "warn"
	DefaultLogFormat = "text"
)

// Check validates d as the engine would, without opening anything: the
// engine's keys with xfer.Config.WithDefaults, the others here. Its
// errors name the key. d is not changed: its zero fields still mean the
// defaults.
func (d Document) Check() error {
	if _, err := d.Engine.WithDefaults(); err != nil {
		return err
	}
	if _, err := ParseLogLevel(d.LogLevel); err != nil {
		return fmt.Errorf("config: log_level %q: %w", d.LogLevel, err)
	}
	if _, err := ParseLogFormat(d.LogFormat); err != nil {
		return fmt.Errorf("config: log_format %q: %w", d.LogFormat, err)
	}
	if d.ChunkSize < 0 {
		return fmt.Errorf("config: chunk_size %d: must not be negative", d.ChunkSize)
	}
	return nil
}

// Connector returns the connector's Config that d describes (the Library
// program's document). Its logger is on w at d's level and format.
func (d Document) Connector(w io.Writer) (connector.Config, error) {
	log, err := NewLogger(w, d.LogLevel, d.LogFormat)
	if err != nil {
		return connector.Config{}, err
	}
	cfg := connector.Config{
		Engine:        d.Engine,
		Role:          d.Role,
		Producer:      d.Producer,
		TTL:           d.TTL,
		Pull:          d.Pull,
		ChunkSize:     d.ChunkSize,
		WaitForMemory: d.WaitForMemory,
		WaitSpin:      d.WaitSpin,
		CallTimeout:   d.CallTimeout,
		Logger:        log,
	}

	if d.Engine.Logger == nil {
		cfg.Engine.Logger = log
	}
	return cfg, nil
}

// ParseLogLevel parses debug, info, warn (or warning) or error, in any
// case; "" is warn.
func ParseLogLevel(s string) (slog.Level, error) {
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

// ParseLogFormat parses text or json, in any case; "" is text.
func ParseLogFormat(s string) (string, error) {
	switch f := strings.ToLower(strings.TrimSpace(s)); f {
	case "", "text":
		return "text", nil
	case "json":
		return f, nil
	}
	return "", fmt.Errorf("must be text or json")
}

// NewLogger returns a logger writing to w at the named level ("" is warn),
// as text or JSON ("" is text). Its errors name the key.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := ParseLogLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log_level %q: %w", level, err)
	}
	f, err := ParseLogFormat(format)
	if err != nil {
		return nil, fmt.Errorf("log_format %q: %w", format, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	if f == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/xferio/xfer/config"
)

// The command's own config file keys are config's (log_level, log_format,
// metrics_listen): like the engine's they come from the file, then
// XFER_<KEY>, then the flag (--log-level, --log-format, --metrics-listen)
// when it was given.
const (
	defaultLogLevel  = config.DefaultLogLevel
	defaultLogFormat = config.DefaultLogFormat
)

// newLogger returns a logger writing to w at the named level ("" is warn),
// as text or JSON ("" is text). Its errors name the flags, which are what
// the values come from when the file and the environment have none.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	if _, err := config.ParseLogLevel(level); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	if _, err := config.ParseLogFormat(format); err != nil {
		return nil, fmt.Errorf("--log-format %q: %w", format, err)
	}
	return config.NewLogger(w, level, format)
}

package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
)

// exitError fails a command that has already told the user why (doctor's
// summary): the exit status is 1 and nothing more is printed.
type exitError struct{ msg string }

func (e *exitError) Error() string { return e.msg }

// globals is the state the root command hands to its subcommands.
type globals struct {
	configPath string
	logLevel   string
	logFormat  string
	stdout     io.Writer
	stderr     io.Writer
	log        *slog.Logger
	warnEnv    sync.Once  // unknown XFER_ variables are reported once
	ops        *opsServer // the operations endpoint of bench (nil: none)
}

// config loads the configuration: the file, the environment, then the flags
// in fs that were set.
func (g *globals) config(fs *pflag.FlagSet) (xfer.Config, error) {
	g.warnEnv.Do(func() {
		for _, w := range unknownEnv(os.Environ()) {
			fmt.Fprintf(g.stderr, "xfer: warning: %s\n", w)
		}
	})
	doc, err := loadSettings(g.configFile(), os.LookupEnv, fs)
	cfg := doc.Engine
	if err != nil {
		return cfg, err
	}
	if fs != nil {
		if f := fs.Lookup("secret"); f != nil && f.Changed {
			fmt.Fprintf(g.stderr, "xfer: warning: --secret shows in ps and in the shell's history: use --secret-file, secret_file in the config, or %sSECRET\n", envPrefix)
		}
	}
	// log_level and log_format from the file or the environment (a flag
	// given on the command line wins, as loadSettings applied it last).
	if doc.LogLevel != "" || doc.LogFormat != "" {
		if doc.LogLevel != "" {
			g.logLevel = doc.LogLevel
		}
		if doc.LogFormat != "" {
			g.logFormat = doc.LogFormat
		}
		if g.log, err = newLogger(g.stderr, g.logLevel, g.logFormat); err != nil {
			return cfg, err
		}
	}
	cfg.Logger = g.log
	return cfg, nil
}

// configFile is the config file in use, or "".
func (g *globals) configFile() string {
	if g.configPath != "" {
		return g.configPath
	}
	return os.Getenv(envConfigFile)
}

// policies lists the transport policies for help texts: auto, then the
// transports this build has, best first.
var policies = string(xfer.PolicyAuto) + ", " + strings.Join(xfer.TransportNames(), ", ")

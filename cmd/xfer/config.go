package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/config"
)

// The effective configuration is built in three layers, each overriding the
// one before: the YAML file (--config, or $XFER_CONFIG), the environment
// (XFER_<KEY>), and the command-line flags that were given explicitly.
// RDMA_DEVICE_NAME, if set, names the RDMA device over the file (the
// variable the other engines read), and XFER_DEVICE over every source.
//
// Package config owns the file: its keys (from the yaml tags of
// xfer.Config and the configs it nests), the YAML decoding with errors
// that name the file, the line and the key, the aliases and the
// production layout. This file adds the environment and the flags only,
// both driven by config.Keys: each key's variables (Key.Env) and flag
// (Key.Flag), parsed by Key.Set, the code that parses the file's values.

// envPrefix is the prefix of the environment variables that override the
// file: XFER_MEMORY_MB overrides memory_mb.
const envPrefix = config.EnvPrefix

// envConfigFile names the config file when --config is not given.
const envConfigFile = envPrefix + "CONFIG"

// The variables that name the RDMA device: XFER_DEVICE overrides every
// other source; RDMA_DEVICE_NAME overrides the file.
const (
	envDevice     = "XFER_DEVICE"
	envDeviceName = "RDMA_DEVICE_NAME"
)

// fileKeys returns the file's top-level keys, for help.
func fileKeys() string {
	var keys []string
	for _, k := range config.Keys(config.Command) {
		keys = append(keys, k.Flat)
	}
	return strings.Join(keys, ", ")
}

// loadConfig builds the engine's configuration from the file at path (none
// when path is empty), then the environment (read through lookupEnv), then
// the flags in fs that were set on the command line; RDMA_DEVICE_NAME
// names the device over the file, XFER_DEVICE over everything. A flag overrides a key when its name is the top-level
// key with '-' for '_' (--memory-mb for memory_mb).
func loadConfig(path string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (xfer.Config, error) {
	doc, err := loadSettings(path, lookupEnv, fs)
	return doc.Engine, err
}

// loadSettings is loadConfig that returns the whole document: the
// engine's keys and the command's own (log_level, log_format,
// metrics_listen), built from the same three layers.
func loadSettings(path string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (config.Document, error) {
	var doc config.Document
	if path != "" {
		var err error
		if doc, err = config.ReadFile(path, config.Command); err != nil {
			return doc, err
		}
	}
	if v, _ := lookupEnv(envDeviceName); v != "" {
		doc.Engine.RDMA.Device = v // over the file; XFER_RDMA_DEVICE and --rdma-device over it
	}
	if err := applyEnv(&doc, lookupEnv); err != nil {
		return doc, err
	}
	if fs != nil {
		if err := applyFlags(&doc, fs); err != nil {
			return doc, err
		}
	}
	if v, _ := lookupEnv(envDevice); v != "" {
		doc.Engine.RDMA.Device = v
	}
	return doc, nil
}

// applyEnv sets each key whose XFER_<KEY> variable is set and not empty.
// A nested key has two names when its top-level key lacks the section's
// name (XFER_CONNS, XFER_TCP_CONNS): setting both is an error. Other XFER_
// variables are ignored (unknownEnv warns of them).
func applyEnv(doc *config.Document, lookupEnv func(string) (string, bool)) error {
	for _, k := range config.Keys(config.Command) {
		var name, s string
		for _, n := range k.Env() {
			val, ok := lookupEnv(n)
			if !ok || val == "" {
				continue
			}
			if name != "" {
				return fmt.Errorf("%s and %s both set %s: use one of them", name, n, k.Name)
			}
			name, s = n, val
		}
		if name == "" {
			continue
		}
		if err := k.Set(doc, s); err != nil {
			return fmt.Errorf("%s=%q: %w", name, s, err)
		}
	}
	return nil
}

// applyFlags sets each key whose flag exists in fs and was given.
func applyFlags(doc *config.Document, fs *pflag.FlagSet) error {
	for _, k := range config.Keys(config.Command) {
		fl := fs.Lookup(k.Flag())
		if fl == nil || !fl.Changed {
			continue
		}
		if err := k.Set(doc, fl.Value.String()); err != nil {
			return fmt.Errorf("--%s=%q: %w", k.Flag(), fl.Value.String(), err)
		}
	}
	return nil
}

// addOpTimeoutFlag adds --op-timeout (op_timeout) and --reconnect-wait
// (reconnect_wait), the bounds on a silent peer and on a dead one, to a
// command that opens an engine.
func addOpTimeoutFlag(fs *pflag.FlagSet) {
	fs.Duration("op-timeout", xfer.DefaultOpTimeout, "fail the operations outstanding with a peer that moves no byte for this `duration` (its connection is closed); negative: never")
	fs.Duration("reconnect-wait", xfer.DefaultReconnectWait, "dial a peer whose address refuses or resets connections (it died, or is restarting) again, and fail its operations within this `duration`; raise it to ride through a peer's restart; negative: fail at the first refusal")
}

// sizeFlag parses the byte size that flag name holds (bytesize.Parse); 0
// when it is empty.
func sizeFlag(fs *pflag.FlagSet, name string) (int64, error) {
	s, _ := fs.GetString(name)
	if s == "" {
		return 0, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", name, err)
	}
	return n, nil
}

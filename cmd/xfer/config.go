package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/xferio/xfer"
)

// The effective configuration is built in three layers, each overriding the
// one before: the YAML file (--config, or $XFER_CONFIG), the environment
// (XFER_<KEY>), and the command-line flags that were given explicitly.
//
// All three are driven by the yaml tags of xfer.Config, through reflection in
// configFields and setField below. No library covers "YAML with unknown-key
// errors + environment + cobra flags, with errors that name the key" without
// more weight than these hundred lines (viper, for one, lowercases keys,
// ignores unknown ones and silently coerces bad values), and this way a field
// added to xfer.Config is picked up by all three layers at once; the
// reflection test in config_test.go makes sure setField can parse it.

// envPrefix is the prefix of the environment variables that override the
// file: XFER_MEMORY_MB overrides memory_mb.
const envPrefix = "XFER_"

// envConfigFile names the config file when --config is not given.
const envConfigFile = envPrefix + "CONFIG"

// configField is one settable field of xfer.Config.
type configField struct {
	key   string // yaml key, e.g. "memory_mb"
	index int    // field index in xfer.Config
}

func (f configField) env() string  { return envPrefix + strings.ToUpper(f.key) }
func (f configField) flag() string { return strings.ReplaceAll(f.key, "_", "-") }

// configFields lists the fields of xfer.Config that have a yaml key.
func configFields() []configField {
	t := reflect.TypeFor[xfer.Config]()
	var out []configField
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		out = append(out, configField{key: key, index: i})
	}
	return out
}

// configKeys returns the known keys, for error messages.
func configKeys() string {
	var keys []string
	for _, f := range configFields() {
		keys = append(keys, f.key)
	}
	return strings.Join(keys, ", ")
}

// loadConfig builds the configuration from the file at path (none when path
// is empty), then the environment (read through lookupEnv), then the flags in
// fs that were set on the command line. A flag overrides a key when its name
// is the key with '-' for '_' (--memory-mb for memory_mb).
func loadConfig(path string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (xfer.Config, error) {
	var cfg xfer.Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		if err := decodeConfig(path, data, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := applyEnv(&cfg, lookupEnv); err != nil {
		return cfg, err
	}
	if fs != nil {
		if err := applyFlags(&cfg, fs); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// decodeConfig decodes a YAML mapping of xfer.Config keys into cfg. name is
// the file name used in errors, which look like
// "xfer.yaml:3: memory_mb: "abc": not an integer".
//
// yaml.v3's Decoder.KnownFields(true) would catch unknown keys, but its
// errors for bad values ("line 3: cannot unmarshal !!str `abc` into int") do
// not say which key, so yaml.v3 only parses here and each value is converted
// by setField, the same code that converts environment variables and flags.
func decodeConfig(name string, data []byte, cfg *xfer.Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: expected a mapping of keys (%s) to values", name, root.Line, configKeys())
	}
	byKey := make(map[string]configField)
	for _, f := range configFields() {
		byKey[f.key] = f
	}
	seen := make(map[string]int)
	v := reflect.ValueOf(cfg).Elem()
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		f, ok := byKey[k.Value]
		if !ok || k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: unknown key %q (known keys: %s)", name, k.Line, k.Value, configKeys())
		}
		if line, dup := seen[k.Value]; dup {
			return fmt.Errorf("%s:%d: key %q repeats the one on line %d", name, k.Line, k.Value, line)
		}
		seen[k.Value] = k.Line
		if val.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: %s: expected a single value", name, val.Line, k.Value)
		}
		if val.Tag == "!!null" {
			continue // "key:" with no value keeps the default
		}
		if err := setField(v.Field(f.index), val.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %q: %w", name, val.Line, k.Value, val.Value, err)
		}
	}
	return nil
}

// applyEnv sets each field whose XFER_<KEY> variable is set and not empty.
// Other XFER_ variables are ignored.
func applyEnv(cfg *xfer.Config, lookupEnv func(string) (string, bool)) error {
	v := reflect.ValueOf(cfg).Elem()
	for _, f := range configFields() {
		s, ok := lookupEnv(f.env())
		if !ok || s == "" {
			continue
		}
		if err := setField(v.Field(f.index), s); err != nil {
			return fmt.Errorf("%s=%q: %w", f.env(), s, err)
		}
	}
	return nil
}

// applyFlags sets each field whose flag exists in fs and was given.
func applyFlags(cfg *xfer.Config, fs *pflag.FlagSet) error {
	v := reflect.ValueOf(cfg).Elem()
	for _, f := range configFields() {
		fl := fs.Lookup(f.flag())
		if fl == nil || !fl.Changed {
			continue
		}
		if err := setField(v.Field(f.index), fl.Value.String()); err != nil {
			return fmt.Errorf("--%s=%q: %w", f.flag(), fl.Value.String(), err)
		}
	}
	return nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	policyType   = reflect.TypeFor[xfer.Policy]()
)

// errUnsupportedField means xfer.Config grew a field of a type setField does
// not know; the reflection test in config_test.go catches it.
var errUnsupportedField = errors.New("unsupported config field type")

// setField parses s into v according to v's type.
func setField(v reflect.Value, s string) error {
	s = strings.TrimSpace(s)
	switch v.Type() {
	case durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration (e.g. 5s, 1m30s)")
		}
		v.SetInt(int64(d))
		return nil
	case policyType:
		p, err := xfer.ParsePolicy(s)
		if err != nil {
			return fmt.Errorf("not one of %s, %s, %s, %s", xfer.PolicyAuto, xfer.PolicyTCP, xfer.PolicySHM, xfer.PolicyRDMA)
		}
		v.SetString(string(p))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if errors.Is(err, strconv.ErrRange) {
			return errors.New("integer out of range")
		}
		if err != nil {
			return errors.New("not an integer")
		}
		v.SetInt(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not true or false")
		}
		v.SetBool(b)
	default:
		return fmt.Errorf("%w %s", errUnsupportedField, v.Type())
	}
	return nil
}

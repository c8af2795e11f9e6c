package main

import (
	"encoding"
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
	"github.com/xferio/xfer/mem"
)

// The effective configuration is built in three layers, each overriding the
// one before: the YAML file (--config, or $XFER_CONFIG), the environment
// (XFER_<KEY>), and the command-line flags that were given explicitly.
// Then XFER_DEVICE, if set, names the RDMA device, and RDMA_DEVICE_NAME
// does when nothing else did.
//
// All three are driven by the yaml tags of xfer.Config and of the
// per-layer configs it nests (tcp.Config, verbs.Config), through reflection
// in configFields and setField below. No library covers "YAML with
// unknown-key errors + environment + cobra flags, with errors that name the
// key" without more weight than these few hundred lines (viper, for one,
// lowercases keys, ignores unknown ones and silently coerces bad values),
// and this way a field added to any layer's Config is picked up by all
// three layers at once; the reflection test in config_test.go makes sure
// setField can parse it.
//
// A nested layer's keys are accepted in two forms: in its mapping (rdma:
// {device: rxe0}, tcp: {conns: 3}) and at the top level as they were
// before the layers had configs of their own (rdma_device: rxe0, conns: 3;
// sections below gives the prefix). A file may use both forms, but not for
// the same option.

// envPrefix is the prefix of the environment variables that override the
// file: XFER_MEMORY_MB overrides memory_mb.
const envPrefix = "XFER_"

// envConfigFile names the config file when --config is not given.
const envConfigFile = envPrefix + "CONFIG"

// The variables that name the RDMA device: XFER_DEVICE overrides every
// other source; RDMA_DEVICE_NAME applies when none set the device.
const (
	envDevice     = "XFER_DEVICE"
	envDeviceName = "RDMA_DEVICE_NAME"
)

// sections maps the yaml key of each nested config of xfer.Config to the
// prefix its keys take at the top level: tcp's keys keep their old
// unprefixed names (conns, poll_spin), rdma's had rdma_ (rdma_device).
var sections = map[string]string{
	"tcp":  "",
	"rdma": "rdma_",
}

// configField is one settable field of xfer.Config or of a config it nests.
type configField struct {
	key     string // canonical key: "memory_mb", "tcp.conns", "rdma.device"
	flat    string // the key at the top level: "memory_mb", "conns", "rdma_device"
	section string // "" for xfer.Config's own fields, else "tcp", "rdma"
	sub     string // the key inside its section: "conns", "device"
	index   []int  // field index path in xfer.Config
}

// env returns the field's environment variables: XFER_<FLAT KEY>, and for a
// nested field whose canonical key differs, XFER_<SECTION>_<KEY> as well
// (XFER_CONNS and XFER_TCP_CONNS; rdma's two names are the same).
func (f configField) env() []string {
	names := []string{envPrefix + strings.ToUpper(f.flat)}
	if n := envPrefix + strings.ToUpper(strings.ReplaceAll(f.key, ".", "_")); n != names[0] {
		names = append(names, n)
	}
	return names
}

func (f configField) flag() string { return strings.ReplaceAll(f.flat, "_", "-") }

// yamlKey is the yaml key of a struct field ("" when it has none).
func yamlKey(sf reflect.StructField) string {
	key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if key == "-" {
		return ""
	}
	return key
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// isSection reports whether a field of type t is a nested config (a struct
// that does not parse itself from text).
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// configFields lists the fields of xfer.Config, and of the configs it
// nests, that have a yaml key.
func configFields() []configField {
	t := reflect.TypeFor[xfer.Config]()
	var out []configField
	for i := range t.NumField() {
		sf := t.Field(i)
		key := yamlKey(sf)
		if key == "" {
			continue
		}
		if !isSection(sf.Type) {
			out = append(out, configField{key: key, flat: key, index: []int{i}})
			continue
		}
		prefix, ok := sections[key]
		if !ok {
			panic(fmt.Sprintf("xfer.Config.%s: nested config %q has no entry in sections", sf.Name, key))
		}
		for j := range sf.Type.NumField() {
			sub := yamlKey(sf.Type.Field(j))
			if sub == "" {
				continue
			}
			out = append(out, configField{key: key + "." + sub, flat: prefix + sub, section: key, sub: sub, index: []int{i, j}})
		}
	}
	return out
}

// configKeys returns the top-level keys, for help and error messages.
func configKeys() string {
	var keys []string
	for _, f := range configFields() {
		keys = append(keys, f.flat)
	}
	keys = append(keys, cliKeys()...)
	return strings.Join(keys, ", ")
}

// sectionKeys returns the keys of one nested config, for error messages.
func sectionKeys(section string) string {
	var keys []string
	for _, f := range configFields() {
		if f.section == section {
			keys = append(keys, f.sub)
		}
	}
	return strings.Join(keys, ", ")
}

// sectionNames returns the nested configs' keys, "tcp, rdma".
func sectionNames() string {
	var names []string
	for _, f := range configFields() {
		if f.section != "" && (len(names) == 0 || names[len(names)-1] != f.section) {
			names = append(names, f.section)
		}
	}
	return strings.Join(names, ", ")
}

// loadConfig builds the configuration from the file at path (none when path
// is empty), then the environment (read through lookupEnv), then the flags in
// fs that were set on the command line, then XFER_DEVICE and
// RDMA_DEVICE_NAME. A flag overrides a key when its name is the top-level
// key with '-' for '_' (--memory-mb for memory_mb).
func loadConfig(path string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (xfer.Config, error) {
	cfg, _, err := loadSettings(path, lookupEnv, fs)
	return cfg, err
}

// loadSettings is loadConfig that also returns the command's own settings
// (cliSettings), built from the same three layers.
func loadSettings(path string, lookupEnv func(string) (string, bool), fs *pflag.FlagSet) (xfer.Config, cliSettings, error) {
	var cfg xfer.Config
	var cli cliSettings
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, cli, fmt.Errorf("config: %w", err)
		}
		if err := decodeFile(path, data, &cfg, &cli); err != nil {
			return cfg, cli, err
		}
	}
	if err := applyEnv(&cfg, lookupEnv); err != nil {
		return cfg, cli, err
	}
	if err := cli.applyEnv(lookupEnv); err != nil {
		return cfg, cli, err
	}
	if fs != nil {
		if err := applyFlags(&cfg, fs); err != nil {
			return cfg, cli, err
		}
		if err := cli.applyFlags(fs); err != nil {
			return cfg, cli, err
		}
	}
	if v, _ := lookupEnv(envDevice); v != "" {
		cfg.RDMA.Device = v
	} else if v, _ := lookupEnv(envDeviceName); v != "" && cfg.RDMA.Device == "" {
		cfg.RDMA.Device = v
	}
	return cfg, cli, nil
}

// seenKey is where a file set an option: the key as written, and its line.
type seenKey struct {
	written string
	line    int
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
	return decodeFile(name, data, cfg, &cliSettings{})
}

// decodeFile is decodeConfig that also decodes the command's own keys
// (cliKeys) into cli, and accepts the production layout's transport
// section (config_production.go).
func decodeFile(name string, data []byte, cfg *xfer.Config, cli *cliSettings) error {
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
		return fmt.Errorf("%s:%d: expected a mapping of keys (%s; or the mappings %s) to values", name, root.Line, configKeys(), sectionNames())
	}
	flat := make(map[string]configField)
	nested := make(map[string]configField)
	byKey := make(map[string]configField)
	for _, f := range configFields() {
		flat[f.flat] = f
		byKey[f.key] = f
		if f.section != "" {
			nested[f.key] = f
		}
	}
	var amst amstState
	seen := make(map[string]seenKey) // by canonical key, and by section name
	v := reflect.ValueOf(cfg).Elem()
	set := func(f configField, k, val *yaml.Node, written string) error {
		if s, dup := seen[f.key]; dup {
			if s.written == written {
				return fmt.Errorf("%s:%d: key %q repeats the one on line %d", name, k.Line, written, s.line)
			}
			return fmt.Errorf("%s:%d: key %q sets the same option as %q on line %d: use one of them", name, k.Line, written, s.written, s.line)
		}
		seen[f.key] = seenKey{written, k.Line}
		if val.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: %s: expected a single value", name, val.Line, written)
		}
		if val.Tag == "!!null" {
			return nil // "key:" with no value keeps the default
		}
		if err := setField(v.FieldByIndex(f.index), val.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %q: %w", name, val.Line, written, val.Value, err)
		}
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, val := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s:%d: a key must be a plain name (known keys: %s; or the mappings %s)", name, k.Line, configKeys(), sectionNames())
		}
		if _, ok := sections[k.Value]; ok {
			if s, dup := seen[k.Value]; dup {
				return fmt.Errorf("%s:%d: key %q repeats the one on line %d", name, k.Line, k.Value, s.line)
			}
			seen[k.Value] = seenKey{k.Value, k.Line}
			if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
				continue // "rdma:" with nothing under it
			}
			if val.Kind != yaml.MappingNode {
				return fmt.Errorf("%s:%d: %s: expected a mapping of keys (%s) to values", name, val.Line, k.Value, sectionKeys(k.Value))
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				sk, sv := val.Content[j], val.Content[j+1]
				f, ok := nested[k.Value+"."+sk.Value]
				if !ok || sk.Kind != yaml.ScalarNode {
					return fmt.Errorf("%s:%d: unknown key %q in %s (known keys: %s)", name, sk.Line, sk.Value, k.Value, sectionKeys(k.Value))
				}
				if err := set(f, sk, sv, f.key); err != nil {
					return err
				}
			}
			continue
		}
		if k.Value == "transport" && val.Kind == yaml.MappingNode {
			// The production layout: transport: {amst: {...}}.
			if s, dup := seen[k.Value]; dup {
				return fmt.Errorf("%s:%d: key %q repeats the one on line %d", name, k.Line, k.Value, s.line)
			}
			if err := decodeAMST(name, val, cfg, &amst, byKey, set); err != nil {
				return err
			}
			if _, ok := seen[k.Value]; !ok {
				seen[k.Value] = seenKey{k.Value, k.Line}
			}
			continue
		}
		if handled, err := cli.decode(name, k, val, seen); handled || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		f, ok := flat[k.Value]
		if !ok {
			return fmt.Errorf("%s:%d: unknown key %q (known keys: %s; or the mappings %s)", name, k.Line, k.Value, configKeys(), sectionNames())
		}
		if err := set(f, k, val, k.Value); err != nil {
			return err
		}
	}
	amst.finish(cfg)
	return nil
}

// applyEnv sets each field whose XFER_<KEY> variable is set and not empty.
// A nested field has two names when its top-level key lacks the section's
// name (XFER_CONNS, XFER_TCP_CONNS): setting both is an error. Other XFER_
// variables are ignored.
func applyEnv(cfg *xfer.Config, lookupEnv func(string) (string, bool)) error {
	v := reflect.ValueOf(cfg).Elem()
	for _, f := range configFields() {
		var name, s string
		for _, n := range f.env() {
			val, ok := lookupEnv(n)
			if !ok || val == "" {
				continue
			}
			if name != "" {
				return fmt.Errorf("%s and %s both set %s: use one of them", name, n, f.key)
			}
			name, s = n, val
		}
		if name == "" {
			continue
		}
		if err := setField(v.FieldByIndex(f.index), s); err != nil {
			return fmt.Errorf("%s=%q: %w", name, s, err)
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
		if err := setField(v.FieldByIndex(f.index), fl.Value.String()); err != nil {
			return fmt.Errorf("--%s=%q: %w", f.flag(), fl.Value.String(), err)
		}
	}
	return nil
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	policyType    = reflect.TypeFor[xfer.Policy]()
	hugePagesType = reflect.TypeFor[mem.HugePages]()
)

// errUnsupportedField means a config grew a field of a type setField does
// not know; the reflection test in config_test.go catches it.
var errUnsupportedField = errors.New("unsupported config field type")

// setField parses s into v according to v's type. A type that parses
// itself (encoding.TextUnmarshaler: the transport policy, huge pages,
// memory, gid_index, qp_type) does so; the empty string is its default.
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
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		if s == "" {
			v.SetZero()
			return nil
		}
		if err := u.UnmarshalText([]byte(s)); err != nil {
			if v.Type() == hugePagesType {
				return errors.New("not one of auto, off, explicit")
			}
			return err
		}
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

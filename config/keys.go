package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xferio/xfer"
	"github.com/xferio/xfer/bytesize"
	"github.com/xferio/xfer/connector"
	"github.com/xferio/xfer/mem"
)

// The key table is built from the yaml tags of xfer.Config and of the
// per-layer configs it nests (tcp.Config, verbs.Config) by reflection, so
// that a field added to any layer's Config, or a new nested config, is a
// key of the file, of the environment, of the flags and of the C ABI at
// once; TestEveryField makes sure setValue can parse it. The keys that are
// not the engine's (the log keys, metrics_listen, the connector's) are
// listed in otherKeys.

// flatPrefixes maps the yaml key of a nested config of xfer.Config to the
// prefix its keys take at the top level, where it is not the section's
// name and '_' (rdma: rdma_device): tcp's keys keep their old unprefixed
// names (conns, poll_spin). A new nested config needs no entry: its keys
// are picked up by reflection, at the top level as SECTION_KEY. This is
// the one place a section's top-level form is named.
var flatPrefixes = map[string]string{
	"tcp": "",
}

// flatPrefix is the prefix a section's keys take at the top level.
func flatPrefix(section string) string {
	if p, ok := flatPrefixes[section]; ok {
		return p
	}
	return section + "_"
}

// isSectionName reports whether name is a nested config's key.
func isSectionName(name string) bool { return slices.Contains(Sections(), name) }

// EnvPrefix is the prefix of the environment variables that the xfer
// command reads for the keys: XFER_MEMORY_MB for memory_mb.
const EnvPrefix = "XFER_"

// Key is one key of the configuration document.
type Key struct {
	// Name is the canonical key: "memory_mb", "tcp.conns", "rdma.device".
	Name string
	// Flat is the key at the top level: "memory_mb", "conns",
	// "rdma_device". A document may use either form, not both for one
	// option.
	Flat string
	// Section is the nested config the key belongs to ("tcp", "rdma"),
	// and Sub the key inside it ("conns"); both "" for the engine's own
	// keys and for the keys that are not the engine's.
	Section, Sub string

	programs Program
	index    []int                             // the field in xfer.Config, for an engine key
	set      func(d *Document, s string) error // the setter of any other key
}

// For reports whether the key belongs to the documents of p.
func (k Key) For(p Program) bool { return k.programs&p != 0 }

// IsEngine reports whether the key sets a field of Document.Engine.
func (k Key) IsEngine() bool { return k.index != nil }

// Env returns the key's environment variables: XFER_<FLAT KEY>, and for a
// nested key whose flat key lacks its section's name, XFER_<SECTION>_<KEY>
// as well (XFER_CONNS and XFER_TCP_CONNS; rdma's two names are the same).
func (k Key) Env() []string {
	names := []string{EnvPrefix + strings.ToUpper(k.Flat)}
	if n := EnvPrefix + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_")); n != names[0] {
		names = append(names, n)
	}
	return names
}

// IsList reports whether the key takes a list (allowed_peers): in a file a
// sequence, elsewhere its items separated by commas.
func (k Key) IsList() bool {
	if k.index == nil {
		return false
	}
	return reflect.TypeFor[xfer.Config]().FieldByIndex(k.index).Type.Kind() == reflect.Slice
}

// Flag returns the key's command-line flag, without dashes: the flat key
// with '-' for '_' (memory-mb, rdma-device).
func (k Key) Flag() string { return strings.ReplaceAll(k.Flat, "_", "-") }

// Set parses s into the key's field of d, as the file, the environment
// and the flags all do. The empty string sets a key whose type parses
// itself (transport, gid_index, ...) to its default. The error says what
// is allowed; the caller names the key and where the value came from.
func (k Key) Set(d *Document, s string) error {
	if k.index != nil {
		return setValue(reflect.ValueOf(&d.Engine).Elem().FieldByIndex(k.index), s)
	}
	return k.set(d, s)
}

var table = sync.OnceValue(buildTable)

// Keys returns the keys of p's documents: the engine's first, in the order
// of xfer.Config's fields, then the others. Aliases (a key some program
// accepts under a second name) come last.
func Keys(p Program) []Key {
	var out []Key
	for _, k := range table() {
		if k.For(p) {
			out = append(out, k)
		}
	}
	return out
}

// Lookup returns the key of p whose flat or canonical name is name.
func Lookup(p Program, name string) (Key, bool) {
	for _, k := range table() {
		if k.For(p) && (k.Flat == name || k.Name == name) {
			return k, true
		}
	}
	return Key{}, false
}

// Sections returns the nested configs' keys: "tcp", "rdma".
func Sections() []string {
	var names []string
	for _, k := range table() {
		if k.Section != "" && !slices.Contains(names, k.Section) {
			names = append(names, k.Section)
		}
	}
	return names
}

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

func buildTable() []Key {
	t := reflect.TypeFor[xfer.Config]()
	var out []Key
	for i := range t.NumField() {
		sf := t.Field(i)
		key := yamlKey(sf)
		if key == "" {
			continue
		}
		if !isSection(sf.Type) {
			out = append(out, Key{Name: key, Flat: key, programs: every, index: []int{i}})
			continue
		}
		prefix := flatPrefix(key)
		for j := range sf.Type.NumField() {
			ff := sf.Type.Field(j)
			sub := yamlKey(ff)
			if sub == "" {
				continue
			}
			if isSection(ff.Type) { // a section in the section: security.rdma
				for k := range ff.Type.NumField() {
					leaf := yamlKey(ff.Type.Field(k))
					if leaf == "" {
						continue
					}
					out = append(out, Key{Name: key + "." + sub + "." + leaf, Flat: prefix + sub + "_" + leaf, Section: key, Sub: sub + "." + leaf,
						programs: every, index: []int{i, j, k}})
				}
				continue
			}
			out = append(out, Key{Name: key + "." + sub, Flat: prefix + sub, Section: key, Sub: sub, programs: every, index: []int{i, j}})
		}
	}
	out = append(out, otherKeys()...)
	// The connector's name for the RDMA device, from before the C ABI
	// took every key: the same option as rdma.device.
	dev := slices.IndexFunc(out, func(k Key) bool { return k.Name == "rdma.device" })
	alias := out[dev]
	alias.Flat, alias.Section, alias.Sub, alias.programs = "device", "", "", Library
	return append(out, alias)
}

// The keys that are not the engine's.
const (
	KeyLogLevel      = "log_level"
	KeyLogFormat     = "log_format"
	KeyMetricsListen = "metrics_listen"
	KeyWebConfigFile = "web_config_file"
)

// maxTTLSeconds bounds ttl_seconds (about 31 years).
const maxTTLSeconds = 1e9

func otherKeys() []Key {
	str := func(name string, p Program, field func(d *Document) *string, check func(string) (string, error)) Key {
		return Key{Name: name, Flat: name, programs: p, set: func(d *Document, s string) error {
			v, err := check(s)
			if err != nil {
				return err
			}
			*field(d) = v
			return nil
		}}
	}
	lower := func(check func(string) error) func(string) (string, error) {
		return func(s string) (string, error) {
			s = strings.ToLower(strings.TrimSpace(s))
			return s, check(s)
		}
	}
	return []Key{
		str(KeyLogLevel, every, func(d *Document) *string { return &d.LogLevel },
			lower(func(s string) error { _, err := ParseLogLevel(s); return err })),
		str(KeyLogFormat, every, func(d *Document) *string { return &d.LogFormat },
			lower(func(s string) error { _, err := ParseLogFormat(s); return err })),
		// An address: the listen checks it.
		str(KeyMetricsListen, Command, func(d *Document) *string { return &d.MetricsListen },
			func(s string) (string, error) { return strings.TrimSpace(s), nil }),
		// A path: the endpoint checks the file.
		str(KeyWebConfigFile, Command, func(d *Document) *string { return &d.WebConfigFile },
			func(s string) (string, error) { return strings.TrimSpace(s), nil }),
		{Name: "kv.disk_dir", Flat: "kv_disk_dir", Section: "kv", Sub: "disk_dir", programs: Command, set: func(d *Document, s string) error {
			d.KVDiskDir = strings.TrimSpace(s)
			return nil
		}},
		{Name: "kv.disk_size", Flat: "kv_disk_size", Section: "kv", Sub: "disk_size", programs: Command, set: func(d *Document, s string) error {
			n, err := bytesize.Parse(strings.TrimSpace(s))
			if err != nil {
				return err
			}
			if n < 0 {
				return errors.New("must not be negative")
			}
			d.KVDiskSize = n
			return nil
		}},
		{Name: "role", Flat: "role", programs: Library, set: func(d *Document, s string) (err error) {
			d.Role, err = connector.ParseRole(strings.ToLower(strings.TrimSpace(s)))
			if err != nil {
				return errors.New("not one of producer, consumer, both")
			}
			return nil
		}},
		str("producer", Library, func(d *Document) *string { return &d.Producer },
			func(s string) (string, error) { return strings.TrimSpace(s), nil }),
		{Name: "ttl_seconds", Flat: "ttl_seconds", programs: Library, set: func(d *Document, s string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			switch {
			case err != nil || math.IsNaN(f):
				return errors.New("not a number of seconds")
			case f > maxTTLSeconds || f < -maxTTLSeconds:
				return fmt.Errorf("out of range (at most %g seconds; negative: forever)", maxTTLSeconds)
			case f < 0:
				d.TTL = -1
			case f == 0:
				d.TTL = 0
			default:
				d.TTL = max(time.Duration(f*float64(time.Second)), time.Nanosecond)
			}
			return nil
		}},
		{Name: "pull", Flat: "pull", programs: Library, set: func(d *Document, s string) (err error) {
			d.Pull, err = connector.ParsePull(strings.ToLower(strings.TrimSpace(s)))
			if err != nil {
				return errors.New("not one of auto, read, write")
			}
			return nil
		}},
		{Name: "chunk_size", Flat: "chunk_size", programs: Library, set: func(d *Document, s string) error {
			n, err := parseInt(s, 64)
			if err == nil && n < 0 {
				err = errors.New("must not be negative")
			}
			if err == nil && n > math.MaxInt32 {
				err = errors.New("integer out of range")
			}
			if err != nil {
				return err
			}
			d.ChunkSize = int(n)
			return nil
		}},
		{Name: "wait_for_memory", Flat: "wait_for_memory", programs: Library, set: func(d *Document, s string) (err error) {
			d.WaitForMemory, err = parseBool(s)
			return err
		}},
		{Name: "call_timeout", Flat: "call_timeout", programs: Library, set: func(d *Document, s string) error {
			v, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return errors.New("not a duration (e.g. 30s, 0s)")
			}
			d.CallTimeout = v
			return nil
		}},
		{Name: "wait_spin", Flat: "wait_spin", programs: Library, set: func(d *Document, s string) error {
			v, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return errors.New("not a duration (e.g. 50us, 0s)")
			}
			d.WaitSpin = v
			return nil
		}},
	}
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	policyType    = reflect.TypeFor[xfer.Policy]()
	hugePagesType = reflect.TypeFor[mem.HugePages]()
)

// setValue parses s into v according to v's type. A type that parses
// itself (encoding.TextUnmarshaler: the transport policy, huge pages,
// memory, gid_index, qp_type) does so; the empty string is its default.
func setValue(v reflect.Value, s string) error {
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
			return fmt.Errorf("not one of %s, %s", xfer.PolicyAuto, strings.Join(xfer.TransportNames(), ", "))
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
		n, err := parseInt(s, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case reflect.Bool:
		b, err := parseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("%w %s", ErrUnsupportedField, v.Type())
		}
		var items []string
		for _, it := range strings.Split(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		v.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("%w %s", ErrUnsupportedField, v.Type())
	}
	return nil
}

func parseInt(s string, bits int) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
	if errors.Is(err, strconv.ErrRange) {
		return 0, errors.New("integer out of range")
	}
	if err != nil {
		return 0, errors.New("not an integer")
	}
	return n, nil
}

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, errors.New("not true or false")
	}
	return b, nil
}

package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xferio/xfer"
)

// The decoders of this package (YAML in yaml.go, JSON in json.go) parse a
// document into a tree of nodes, and one walk (below) turns the tree into
// a Document: one set of rules, one set of error messages, whichever the
// syntax. The walk converts every value with Key.Set, the same code that
// converts environment variables and flags, and keeps going after a
// problem, so that one error names every unknown key and bad value.

type nodeKind uint8

const (
	scalarNode   nodeKind = iota + 1
	nullNode              // "key:" with no value, or JSON null: the default
	mappingNode           // pairs holds its keys and values
	sequenceNode          // items holds its values
	otherNode             // an alias, or nesting deeper than any key
)

// node is a value of a document, with the line it starts on.
type node struct {
	kind  nodeKind
	value string // a scalar's text
	line  int
	pairs []pair
	items []*node // a sequence's
}

type pair struct{ key, val *node }

// maxDepth is how deep the tree goes: a document's deepest keys are
// transport.amst's, at depth 3; what lies below is an otherNode.
const maxDepth = 4

// seenKey is where a document set an option: the key as written, and its
// line.
type seenKey struct {
	written string
	line    int
}

// keyError is a Problem's error: its message, the kind of problem it is
// (ErrUnknownKey, ...) and, for a bad value, what the key's parser said.
type keyError struct {
	kind  error
	cause error
	msg   string
}

func (e *keyError) Error() string { return e.msg }

func (e *keyError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

type decoder struct {
	prog     Program
	doc      Document
	problems []Problem
	seen     map[string]seenKey // by canonical key, and by section name
	flat     map[string]Key     // the top-level keys
	nested   map[string]Key     // the sections' keys, by canonical name
	listed   map[string]bool    // where the known keys were listed already
	amstMB   int                // the production layout's buffers, in MiB
}

func newDecoder(p Program) *decoder {
	d := &decoder{prog: p, seen: map[string]seenKey{}, flat: map[string]Key{}, nested: map[string]Key{}, listed: map[string]bool{}}
	for _, k := range Keys(p) {
		if k.Section != "" {
			d.nested[k.Name] = k
		}
		d.flat[k.Flat] = k
	}
	return d
}

func (d *decoder) problem(line int, key string, kind, cause error, format string, a ...any) {
	d.problems = append(d.problems, Problem{Line: line, Key: key, Err: &keyError{kind: kind, cause: cause, msg: fmt.Sprintf(format, a...)}})
}

// decode walks a document's root node into a Document.
func decode(name string, root *node, p Program) (Document, error) {
	d := newDecoder(p)
	d.root(root)
	if len(d.problems) > 0 {
		return Document{}, &Error{File: name, Problems: d.problems}
	}
	d.finishAMST()
	return d.doc, nil
}

func (d *decoder) root(root *node) {
	if root == nil || root.kind == nullNode {
		return // an empty document, or only comments
	}
	if root.kind != mappingNode {
		d.problem(root.line, "", ErrSyntax, nil, "expected a mapping of keys (%s; or the mappings %s) to values",
			d.topKeys(), strings.Join(Sections(), ", "))
		return
	}
	for _, pr := range root.pairs {
		k, val := pr.key, pr.val
		if k.kind != scalarNode {
			d.problem(k.line, "", ErrUnknownKey, nil, "a key must be a plain name (known keys: %s; or the mappings %s)",
				d.topKeys(), strings.Join(Sections(), ", "))
			continue
		}
		if isSectionName(k.value) {
			d.section(k, val)
			continue
		}
		if k.value == amstParent && val.kind == mappingNode {
			d.amst(k, val)
			continue
		}
		if key, ok := d.flat[k.value]; ok {
			d.set(key, k, val, k.value)
			continue
		}
		d.unknown(k, val, "")
	}
}

// section decodes a nested config's mapping (tcp: {conns: 2}).
func (d *decoder) section(k, val *node) {
	name := k.value
	if s, dup := d.seen[name]; dup {
		d.problem(k.line, name, ErrDuplicate, nil, "key %q repeats the one on line %d", name, s.line)
		return
	}
	d.seen[name] = seenKey{name, k.line}
	switch val.kind {
	case nullNode:
		return // "rdma:" with nothing under it
	case mappingNode:
	default:
		d.problem(val.line, name, ErrBadValue, nil, "%s: expected a mapping of keys (%s) to values", name, d.sectionKeys(name))
		return
	}
	for _, pr := range val.pairs {
		sk, sv := pr.key, pr.val
		f, ok := d.nested[name+"."+sk.value]
		if !ok && sk.kind == scalarNode && d.isSubsection(name+"."+sk.value) {
			d.subsection(name+"."+sk.value, sk, sv)
			continue
		}
		if !ok || sk.kind != scalarNode {
			d.unknown(sk, sv, name)
			continue
		}
		d.set(f, sk, sv, f.Name)
	}
}

// isSubsection reports whether path ("security.rdma") is a section nested
// in a section.
func (d *decoder) isSubsection(path string) bool {
	for n := range d.nested {
		if strings.HasPrefix(n, path+".") {
			return true
		}
	}
	return false
}

// subsection decodes a section nested in a section (security.rdma).
func (d *decoder) subsection(path string, k, val *node) {
	if s, dup := d.seen[path]; dup {
		d.problem(k.line, path, ErrDuplicate, nil, "key %q repeats the one on line %d", path, s.line)
		return
	}
	d.seen[path] = seenKey{path, k.line}
	switch val.kind {
	case nullNode:
		return
	case mappingNode:
	default:
		d.problem(val.line, path, ErrBadValue, nil, "%s: expected a mapping of keys to values", path)
		return
	}
	for _, pr := range val.pairs {
		f, ok := d.nested[path+"."+pr.key.value]
		if !ok || pr.key.kind != scalarNode {
			d.problem(pr.key.line, path+"."+pr.key.value, ErrUnknownKey, nil, "unknown key %q in %s", pr.key.value, path)
			continue
		}
		d.set(f, pr.key, pr.val, f.Name)
	}
}

// set stores a value under a key, unless the option was set before.
func (d *decoder) set(f Key, k, val *node, written string) {
	if s, dup := d.seen[f.Name]; dup {
		if s.written == written {
			d.problem(k.line, written, ErrDuplicate, nil, "key %q repeats the one on line %d", written, s.line)
		} else {
			d.problem(k.line, written, ErrDuplicate, nil, "key %q sets the same option as %q on line %d: use one of them", written, s.written, s.line)
		}
		return
	}
	d.seen[f.Name] = seenKey{written, k.line}
	value := val.value
	switch val.kind {
	case nullNode:
		return // keeps the default
	case scalarNode:
	case sequenceNode:
		if !f.IsList() {
			d.problem(val.line, written, ErrBadValue, nil, "%s: expected a single value", written)
			return
		}
		var items []string
		for _, it := range val.items {
			if it.kind != scalarNode || strings.Contains(it.value, ",") {
				d.problem(it.line, written, ErrBadValue, nil, "%s: expected a list of single values without commas", written)
				return
			}
			items = append(items, it.value)
		}
		value = strings.Join(items, ",")
	default:
		d.problem(val.line, written, ErrBadValue, nil, "%s: expected a single value", written)
		return
	}
	if err := f.Set(&d.doc, value); err != nil {
		d.problem(val.line, written, ErrBadValue, err, "%s: %q: %v", written, val.value, err)
	}
}

// The production layout (production.go) is walked here too: amst and
// amstKey decode its section by its table, and finishAMST applies what
// needs the whole document.

// amst decodes a transport mapping of the production layout (k: val).
func (d *decoder) amst(k, val *node) {
	if s, dup := d.seen[amstParent]; dup {
		d.problem(k.line, amstParent, ErrDuplicate, nil, "key %q repeats the one on line %d", amstParent, s.line)
		return
	}
	defer func() {
		if _, ok := d.seen[amstParent]; !ok {
			d.seen[amstParent] = seenKey{amstParent, k.line}
		}
	}()
	for _, pr := range val.pairs {
		k, v := pr.key, pr.val
		if k.kind != scalarNode || k.value != amstSection {
			d.problem(k.line, amstParent+"."+k.value, ErrUnknownKey, nil,
				"transport: a mapping holds the %s section of the production layout (transport: {%s: {enable_rdma: ..., rdma_device: ...}}); "+
					"or write transport: auto or one of "+strings.Join(xfer.TransportNames(), ", "), amstSection, amstSection)
			continue
		}
		switch v.kind {
		case nullNode:
			continue
		case mappingNode:
		default:
			d.problem(v.line, amstPath, ErrBadValue, nil, "%s: expected a mapping of keys (%s) to values", amstPath, amstKnown())
			continue
		}
		for _, pr := range v.pairs {
			d.amstKey(pr.key, pr.val)
		}
	}
}

// amstKey decodes one option of the amst section.
func (d *decoder) amstKey(sk, sv *node) {
	written := amstPath + "." + sk.value
	if sk.kind != scalarNode {
		d.problem(sk.line, amstPath, ErrUnknownKey, nil, "%s: a key must be a plain name (known keys: %s)", amstPath, amstKnown())
		return
	}
	if why, ok := amstRefused[sk.value]; ok {
		d.problem(sk.line, written, ErrBadValue, nil, "%s: not supported: %s", written, why)
		return
	}
	if sv.kind != scalarNode && sv.kind != nullNode {
		d.problem(sv.line, written, ErrBadValue, nil, "%s: expected a single value", written)
		return
	}
	switch sk.value {
	case amstEnableRDMA:
		if sv.kind == nullNode {
			return
		}
		on, err := parseBool(sv.value)
		if err != nil {
			d.problem(sv.line, written, ErrBadValue, err, "%s: %q: %v", written, sv.value, err)
			return
		}
		// true: the auto policy, which uses rdma where both sides have a
		// usable device and falls back to shm or tcp; false: tcp, never
		// rdma.
		policy := xfer.PolicyAuto
		if !on {
			policy = xfer.PolicyTCP
		}
		d.set(d.flat["transport"], sk, &node{kind: scalarNode, value: string(policy), line: sv.line}, written)
		return
	case amstSendMB, amstRecvMB:
		if sv.kind == nullNode {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(sv.value))
		if err != nil || n < 0 || n > maxBufferMB {
			d.problem(sv.line, written, ErrBadValue, nil, "%s: %q: must be an integer from 0 to %d (MiB)", written, sv.value, maxBufferMB)
			return
		}
		d.amstMB += n
		return
	case "rdma_qp_type":
		if why, ok := qpTypeRefusals[strings.ToUpper(strings.TrimSpace(sv.value))]; ok {
			d.problem(sv.line, written, ErrBadValue, nil, "%s: %q: %s", written, sv.value, why)
			return
		}
	}
	key, ok := amstKeys[sk.value]
	if !ok {
		d.unknown(sk, sv, amstPath)
		return
	}
	d.set(d.nested[key], sk, sv, written)
}

// finishAMST applies what needs the whole document: the buffer sizes raise
// memory_mb (the registered pool that sends leave from and receives land
// in) to their sum when it is smaller.
func (d *decoder) finishAMST() {
	mb := d.doc.Engine.MemoryMB
	if d.amstMB == 0 || mb < 0 {
		return // no buffers; or a memory_mb that Check refuses
	}
	if mb == 0 {
		mb = xfer.DefaultMemoryMB
	}
	if d.amstMB > mb {
		d.doc.Engine.MemoryMB = d.amstMB
	}
}

// topKeys lists the top-level keys, for error messages.
func (d *decoder) topKeys() string {
	var keys []string
	for _, k := range Keys(d.prog) {
		keys = append(keys, k.Flat)
	}
	return strings.Join(keys, ", ")
}

// sectionKeys lists a nested config's keys, for error messages.
func (d *decoder) sectionKeys(section string) string {
	var keys []string
	for _, k := range Keys(d.prog) {
		if k.Section == section {
			keys = append(keys, k.Sub)
		}
	}
	return strings.Join(keys, ", ")
}

// unknown reports the key k, found in the mapping at path where ("" for the
// top level, "rdma", "transport.amst"), with a hint when the key is known
// somewhere else: misspelt, in the wrong mapping, or another program's.
// An unknown mapping's known keys get the hint too (dwcp: {log_level:
// info} says log_level is a top-level key).
func (d *decoder) unknown(k, val *node, where string) {
	written := k.value
	if where != "" {
		written = where + "." + k.value
	}
	if k.kind != scalarNode {
		d.problem(k.line, written, ErrUnknownKey, nil, "a key must be a plain name (%s)", d.known(where))
		return
	}
	msg := fmt.Sprintf("unknown key %q", k.value)
	if where != "" {
		msg += " in " + where
	}
	hint := d.hint(k.value, where)
	if hint == "" && val.kind == mappingNode && where == "" {
		var inner []string
		for _, pr := range val.pairs {
			if pr.key.kind != scalarNode {
				continue
			}
			if h := d.placed(pr.key.value, written); h != "" {
				inner = append(inner, fmt.Sprintf("%s.%s (line %d): %s", written, pr.key.value, pr.key.line, h))
			}
		}
		hint = strings.Join(inner, "; ")
	}
	if hint == "" {
		if !d.listed[where] {
			d.listed[where] = true
			hint = "(" + d.known(where) + ")"
		} else {
			hint = "(see the known keys above)"
		}
	}
	d.problem(k.line, written, ErrUnknownKey, nil, "%s: %s", msg, hint)
}

// known lists the keys that belong at where, for an unknown key's error.
func (d *decoder) known(where string) string {
	switch {
	case where == "":
		return "known keys: " + d.topKeys() + "; or the mappings " + strings.Join(Sections(), ", ")
	case where == amstPath:
		return "known keys: " + amstKnown()
	case isSectionName(where):
		return "known keys: " + d.sectionKeys(where)
	}
	return "known keys: " + d.topKeys()
}

// hint says where a key that is not known at where belongs, or "".
func (d *decoder) hint(name, where string) string {
	if h := d.placed(name, where); h != "" {
		return h
	}
	// Another program's key.
	for _, other := range []Program{Command, Library} {
		if other == d.prog {
			continue
		}
		if _, ok := Lookup(other, name); ok && where == "" {
			if _, mine := Lookup(d.prog, name); !mine {
				return fmt.Sprintf("%s is a key of %s, not of %s", name, other, d.prog)
			}
		}
	}
	// A near miss among the keys that belong here.
	var names []string
	switch {
	case where == "":
		for flat := range d.flat {
			names = append(names, flat)
		}
		names = append(names, Sections()...)
	case where == amstPath:
		names = strings.Split(amstKnown(), ", ")
	default:
		for _, k := range d.nested {
			if k.Section == where {
				names = append(names, k.Sub)
			}
		}
	}
	slices.Sort(names)
	if s := Suggest(name, names); s != "" {
		return fmt.Sprintf("did you mean %s?", s)
	}
	return ""
}

// placed says where name belongs when it is a key of the program, but
// not of the mapping at where: "is a top-level key", "belongs in rdma".
// It is "" when name is no key of the program in any mapping.
func (d *decoder) placed(name, where string) string {
	// rdma: {rdma_device: x}: the prefix is the top level's.
	if prefix := flatPrefix(where); isSectionName(where) && prefix != "" {
		if sub, ok := strings.CutPrefix(name, prefix); ok {
			if _, ok := d.nested[where+"."+sub]; ok {
				return fmt.Sprintf("did you mean %s? (%s is its name at the top level)", sub, name)
			}
		}
	}
	// tcp.conns: 2 at the top level: the canonical name of a nested key.
	if k, ok := d.nested[name]; ok && where == "" {
		return fmt.Sprintf("write %s: {%s: ...}, or %s at the top level", k.Section, k.Sub, k.Flat)
	}
	if k, ok := d.flat[name]; ok && where != "" {
		if k.Section != "" {
			return fmt.Sprintf("%s is a top-level key (the same option as %s.%s): write it at the top level", name, k.Section, k.Sub)
		}
		return fmt.Sprintf("%s is a top-level key: write it at the top level", name)
	}
	if slices.Contains(Sections(), name) && where != "" {
		return fmt.Sprintf("%s is a top-level mapping: write it at the top level", name)
	}
	// A key of a section, elsewhere: conns under rdma, device at the top.
	var homes []string
	for _, k := range Keys(d.prog) {
		if k.Section != "" && k.Section != where && k.Sub == name {
			homes = append(homes, fmt.Sprintf("%s: {%s: ...}, or %s at the top level", k.Section, k.Sub, k.Flat))
		}
	}
	if len(homes) > 0 {
		return "it belongs in " + strings.Join(homes, "; or in ")
	}
	return ""
}

// Suggest returns the name in names nearest to s, if it is within a third
// of s's length in edits (a misspelt key, or environment variable); else "".
func Suggest(s string, names []string) string {
	best, bestD := "", len(s)/3+1
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (a dozen lines
// here rather than a dependency for one suggestion).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

package config

import (
	"fmt"
	"os"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// DecodeYAML decodes a YAML document of p's keys. name is the document's
// name in errors, which look like
//
//	xfer.yaml:3: memory_mb: "abc": not an integer
//
// A refused document's error is an *Error that lists every problem found.
//
// yaml.v3's Decoder.KnownFields(true) would catch unknown keys, but only
// the first, and its errors for bad values ("line 3: cannot unmarshal
// !!str `abc` into int") do not say which key; so yaml.v3 only parses here
// and the keys are decoded by the walk in decode.go.
func DecodeYAML(name string, data []byte, p Program) (Document, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Document{}, &Error{File: name, Problems: []Problem{{Line: yamlErrLine(err), Err: fmt.Errorf("%w: %w", ErrSyntax, err)}}}
	}
	if len(doc.Content) == 0 {
		return Document{}, nil // an empty document
	}
	return decode(name, fromYAML(doc.Content[0], 0), p)
}

// ReadFile reads and decodes the YAML file at path (DecodeYAML); errors
// name the file as path.
func ReadFile(path string, p Program) (Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Document{}, fmt.Errorf("config: %w", err)
	}
	return DecodeYAML(path, data, p)
}

// fromYAML converts a yaml.v3 node into the decoder's tree, depth levels
// down from the root. An alias is not followed (no key takes one).
func fromYAML(y *yaml.Node, depth int) *node {
	n := &node{line: y.Line}
	switch {
	case y.Kind == yaml.ScalarNode && y.Tag == "!!null":
		n.kind = nullNode
	case y.Kind == yaml.ScalarNode:
		n.kind, n.value = scalarNode, y.Value
	case y.Kind == yaml.MappingNode && depth < maxDepth:
		n.kind = mappingNode
		for i := 0; i+1 < len(y.Content); i += 2 {
			n.pairs = append(n.pairs, pair{fromYAML(y.Content[i], depth+1), fromYAML(y.Content[i+1], depth+1)})
		}
	case y.Kind == yaml.SequenceNode && depth < maxDepth:
		n.kind = sequenceNode
		for _, c := range y.Content {
			n.items = append(n.items, fromYAML(c, depth+1))
		}
	default:
		n.kind = otherNode
	}
	return n
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+):`)

// yamlErrLine is the line a yaml.v3 syntax error names, or 0.
func yamlErrLine(err error) int {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
